package webhook

// The webhook's tests poison a body once its request is answered, so a
// test that reads a request's bytes later fails instead of passing by
// luck.
func init() { poisonReleasedBodies = true }
