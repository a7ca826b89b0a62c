package harness

import (
	"strings"
	"sync"
)

// Warnings records the Warning headers the API server relays to a client
// (rest.Config.WarningHandler): a webhook's or a policy's warnings.
type Warnings struct {
	mu   sync.Mutex
	list []string
}

// HandleWarningHeader implements rest.WarningHandler.
func (w *Warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// List is every warning received so far, in order.
func (w *Warnings) List() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.list...)
}

// Seen says whether a warning received so far contains part.
func (w *Warnings) Seen(part string) bool {
	for _, text := range w.List() {
		if strings.Contains(text, part) {
			return true
		}
	}
	return false
}
