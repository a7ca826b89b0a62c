# A change freeze: while a freeze window is open, QuantumNodes are not
# created, changed or deleted, except by a break-glass group (who are
# warned). The windows are the role's parameters; the time is the
# request's, input.context.time (qnctl eval --time and fixture cases set
# it, so a freeze is tested without waiting for one).
package example.freeze

params := data.roles[input.context.role]

now := time.parse_rfc3339_ns(input.context.time)

# A dated window: start inclusive, end exclusive.
open contains sprintf("%s (%s, until %s)", [f.name, f.reason, f.end]) if {
	some f in params.freezes
	time.parse_rfc3339_ns(f.start) <= now
	now < time.parse_rfc3339_ns(f.end)
}

# The weekly window, in UTC: time.weekday and time.clock read ns in UTC
# unless given a zone.
open contains sprintf("the weekly freeze (%s from %02d:00 UTC)", [w.day, w.fromHourUTC]) if {
	w := params.weekly
	time.weekday(now) == w.day
	[hour, _, _] := time.clock(now)
	hour >= w.fromHourUTC
}

break_glass if {
	some g in input.context.groups
	g in params.breakGlassGroups
}

deny contains sprintf("%s %s is refused during %s", [lower(input.context.operation), input.context.name, window]) if {
	not break_glass
	some window in open
}

warn contains sprintf("change made during %s by break-glass group", [window]) if {
	break_glass
	some window in open
}
