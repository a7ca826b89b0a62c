package webhook

import (
	"bytes"
	"fmt"
)

// checkBudget scans a JSON body once, without allocating, and refuses it
// when it holds more than maxElements elements (object members and array
// items) or nests deeper than MaxRequestDepth, before any decoding spends
// memory on it. Malformed JSON passes through: the decoder explains it.
func checkBudget(body []byte, maxElements int) error {
	elements, depth := 0, 0
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '"':
			// Most of a review's bytes are inside strings: jump to the
			// closing quote (IndexByte is vectorised) instead of stepping
			// through each byte.
			end := closingQuote(body, i)
			if end < 0 {
				return nil // unterminated: the decoder explains it
			}
			i = end
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
		default:
			continue
		}
		if elements > maxElements {
			return fmt.Errorf("request body has more than %d JSON elements (object members and array items; exceeded at byte %d), the limit of one AdmissionReview; a QuantumNode has at most 256 services", maxElements, i)
		}
	}
	return nil
}

// closingQuote returns the index of the quote that closes the string
// opened at body[open], or -1 when there is none. A quote preceded by an
// odd run of backslashes is escaped; each run is looked at once, so the
// scan stays linear whatever the string holds.
func closingQuote(body []byte, open int) int {
	for from := open + 1; ; {
		k := bytes.IndexByte(body[from:], '"')
		if k < 0 {
			return -1
		}
		q := from + k
		backslashes := 0
		for p := q - 1; p > open && body[p] == '\\'; p-- {
			backslashes++
		}
		if backslashes%2 == 0 {
			return q
		}
		from = q + 1
	}
}
