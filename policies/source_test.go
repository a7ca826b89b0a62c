package policies

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

func TestOpenRefusesWhatIsNoDirectory(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "roles.yaml")
	if err := os.WriteFile(file, []byte(reloadRoles), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct{ dir, want string }{
		"a directory that does not exist": {filepath.Join(dir, "nope"), "policy directory " + filepath.Join(dir, "nope") + ": no such file or directory"},
		"a file":                          {file, "policy directory " + file + " is a file; pass the directory that holds roles.yaml"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := Open(OpenOptions{Dir: c.dir}); err == nil || err.Error() != c.want {
				t.Errorf("Open: %v, want %q", err, c.want)
			}
		})
	}
}

// Both kinds of source report the same things; the bundled set never
// fails a reload and has no age, so strict health never fails on it.
func TestOpenedSourcesReportWhatTheyServe(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"roles.yaml": reloadRoles, "p.rego": "package p\ndeny contains \"no\" if false\n"})
	cases := map[string]struct {
		dir        string
		name       string
		wantStatus string
		loadedAt   bool
	}{
		"the bundled set": {dir: "", name: BundledName, wantStatus: "serving bundled policies ", loadedAt: false},
		"a directory":     {dir: dir, name: dir, wantStatus: "serving ", loadedAt: true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			source, err := Open(OpenOptions{Dir: c.dir})
			if err != nil {
				t.Fatal(err)
			}
			if source.Name() != c.name {
				t.Errorf("Name = %q, want %q", source.Name(), c.name)
			}
			if _, err := source.FS().Open(RolesFile); err != nil {
				t.Errorf("FS holds no %s: %v", RolesFile, err)
			}
			set, err := source.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			engine := NewEngine(set, EngineOptions{})
			done := make(chan error)
			go func() { done <- source.Run(ctx, engine) }()
			waitFor(t, "Status names the served revision", func() bool { return source.Status() == c.wantStatus+set.Revision })
			st := source.ReloadState()
			if st.Revision != set.Revision || st.Err != nil || !st.FailingSince.IsZero() || st.LoadedAt.IsZero() == c.loadedAt {
				t.Errorf("ReloadState = %+v, want revision %s, no failure, load time %v", st, set.Revision, c.loadedAt)
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
}
