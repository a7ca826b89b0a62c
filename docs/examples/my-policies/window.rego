# Warn a requester who is close to the role's rate window limit, so a script
# slows down before it is refused with 429.
package qn.window

# Warn from 90 % of the limit on. Integer arithmetic: exact, and cheaper
# than the arbitrary-precision floats a fraction would take.
near_limit_percent := 90

warn contains msg if {
	w := input.context.window
	used := w.count + 1
	used * 100 >= w.limit * near_limit_percent
	used <= w.limit
	msg := sprintf("rate window: this is change %d of %d allowed per %vs for role %q (%s window); slow down to avoid 429", [used, w.limit, w.periodSeconds, input.context.role, w.key])
}
