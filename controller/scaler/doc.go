// Package scaler reconciles HorizontalQNScalers: at every poll it reads one
// PromQL figure from Prometheus, applies the scaling rule (watermarks with
// hysteresis, fixed steps, a scale-up cooldown, a scale-down stabilization
// window, a fallback, staged scale-ups that roll back on abort conditions)
// and writes the target's /scale when the rule asks for other replicas.
//
// The rule is a pure function (Decide) of the spec, the stored status (the
// scaler's only memory), the time, the target's replicas and the readings;
// the reconciler gathers those inputs, carries the decision out and
// records it. No state lives outside the API server.
package scaler
