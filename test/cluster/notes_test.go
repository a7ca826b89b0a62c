package cluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// notesBlock returns the lines of the installed release's NOTES.txt from
// the line starting with first through the line equal to last, dedented.
func notesBlock(t *testing.T, notes, first, last string) string {
	t.Helper()
	lines := strings.Split(notes, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(strings.TrimSpace(l), first) {
			continue
		}
		indent := len(l) - len(strings.TrimLeft(l, " "))
		var block []string
		for _, m := range lines[i:] {
			if len(m) >= indent {
				m = m[indent:]
			}
			block = append(block, m)
			if strings.HasSuffix(strings.TrimSpace(m), last) {
				return strings.Join(block, "\n")
			}
		}
	}
	t.Fatalf("NOTES.txt has no block from %q to %q:\n%s", first, last, notes)
	return ""
}

// shell runs a command as a user pastes it: sh, the built kubectl on PATH,
// the cluster's kubeconfig.
func (s *installed) shell(t *testing.T, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.Kubeconfig, "PATH="+filepath.Dir(s.Kubectl)+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s\n%v: %s", script, err, out)
	}
	return string(out)
}

// The check NOTES.txt prints after helm install, pasted as a user would,
// prints what NOTES.txt says it prints, and only qn-webhook could have
// produced it.
func TestNotesCheckIsAnsweredByTheWebhook(t *testing.T) {
	s := cluster(t)
	check := notesBlock(t, s.Notes, "cat <<'EOF' | kubectl apply --dry-run=server", "EOF")
	expected := notesBlock(t, s.Notes, "Warning: ", "{\"qn.dev/managed-by\":\"qn-admission\"}")
	out := s.shell(t, check)
	for _, line := range strings.Split(expected, "\n") {
		if !strings.Contains(out, strings.TrimSpace(line)) {
			t.Errorf("NOTES.txt says the check prints %q; it printed:\n%s", line, out)
		}
	}
	logs := s.shell(t, notesBlock(t, s.Notes, "kubectl -n "+releaseNamespace+" logs -l", "grep qn-admission-check")+"\n")
	if !strings.Contains(logs, `"msg":"admission decision"`) {
		t.Errorf("the notes' log command found no decision line for the check:\n%s", logs)
	}
}
