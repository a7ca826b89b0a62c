package e2e

import "strings"

// Contains reports whether err's message contains every part.
func Contains(err error, parts ...string) bool {
	if err == nil {
		return false
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			return false
		}
	}
	return true
}
