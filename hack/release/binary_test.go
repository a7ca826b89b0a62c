package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// goBuild builds a hello-world for linux/arch with extra go build flags.
func goBuild(t *testing.T, arch string, env []string, flags ...string) []byte {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module hello\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append(append([]string{"build", "-o", "hello"}, flags...), ".")...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "GOFLAGS="), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	data, err := os.ReadFile(filepath.Join(dir, "hello"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestCheckBinary(t *testing.T) {
	// Binaries of this machine's architecture: the build cache has their
	// standard library already, where a cross build would compile it anew.
	arch := goarch(t)
	host := v1.Platform{OS: "linux", Architecture: arch}
	other := v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}
	if arch == "arm64" {
		other = v1.Platform{OS: "linux", Architecture: "amd64"}
	}
	static := []string{"CGO_ENABLED=0"}
	asMakeBuilds := []string{"-trimpath", "-tags", "nomsgpack"}
	good := goBuild(t, arch, static, asMakeBuilds...)
	if err := checkBinary("hello", good, host); err != nil {
		t.Errorf("a binary built as make build-platforms builds it: %v", err)
	}
	for name, tc := range map[string]struct {
		data     []byte
		platform v1.Platform
		want     string
	}{
		"another architecture":      {good, other, "hello is built for " + elfMachines[arch].String() + ", not " + platformString(other)},
		"no -trimpath":              {goBuild(t, arch, static, "-tags", "nomsgpack"), host, `built with -trimpath=""`},
		"without the nomsgpack tag": {goBuild(t, arch, static, "-trimpath"), host, "without nomsgpack"},
		"cgo on":                    {goBuild(t, arch, []string{"CGO_ENABLED=1"}, asMakeBuilds...), host, `CGO_ENABLED="1"`},
		"not an executable":         {[]byte("#!/bin/sh\necho hi\n"), host, "is not an ELF executable"},
	} {
		t.Run(name, func(t *testing.T) {
			err := checkBinary("hello", tc.data, tc.platform)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
	// A C program of this machine: dynamically linked against libc.
	if data, err := os.ReadFile("/bin/ls"); err == nil && strings.HasPrefix(string(data), "\x7fELF") {
		if err := checkBinary("/bin/ls", data, host); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
			t.Errorf("/bin/ls: err = %v, want it refused as dynamically linked", err)
		}
	}
}

func goarch(t *testing.T) string {
	out, err := exec.Command("go", "env", "GOARCH").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}
