package pattern

import (
	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// DiscardMatcherLogs sends the logs of Kyverno's matcher nowhere. Its anchor
// handlers log through Kyverno's global logger, which is
// controller-runtime's until a program sets one; if none is ever set,
// controller-runtime prints a stack trace to stderr the first time the
// matcher logs after 30 s ("log.SetLogger(...) was never called"), and every
// log call takes its lock. A program that does not otherwise use
// controller-runtime's logger (qn-webhook, qnctl) calls this once at start;
// what the matcher would log, a Verdict already says.
func DiscardMatcherLogs() { ctrllog.SetLogger(logr.Discard()) }
