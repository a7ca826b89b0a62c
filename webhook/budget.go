package webhook

import "fmt"

// checkBudget scans a JSON body once, without allocating, and refuses it
// when it holds more than maxElements elements (object members and array
// items) or nests deeper than MaxRequestDepth, before any decoding spends
// memory on it. Malformed JSON passes through: the decoder explains it.
func checkBudget(body []byte, maxElements int) error {
	elements, depth := 0, 0
	inString, escaped := false, false
	for i, b := range body {
		if inString {
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
			continue
		}
		switch b {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > MaxRequestDepth {
				return fmt.Errorf("request body nests objects and arrays deeper than %d levels (at byte %d); an AdmissionReview of a QuantumNode nests about 10", MaxRequestDepth, i)
			}
			// A container's first element has no comma before it; count
			// it here (an empty container counts one too: close enough).
			elements++
		case '}', ']':
			depth--
		case ',':
			elements++
		}
		if elements > maxElements {
			return fmt.Errorf("request body has more than %d JSON elements (object members and array items; exceeded at byte %d), the limit of one AdmissionReview; a QuantumNode has at most 256 services", maxElements, i)
		}
	}
	return nil
}
