package main

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// elfMachines maps GOARCH to the ELF machine its binaries declare.
var elfMachines = map[string]elf.Machine{
	"amd64":   elf.EM_X86_64,
	"arm64":   elf.EM_AARCH64,
	"arm":     elf.EM_ARM,
	"ppc64le": elf.EM_PPC64,
	"s390x":   elf.EM_S390,
	"riscv64": elf.EM_RISCV,
}

// checkBinary refuses to package what must not run in a cluster: a binary
// for another platform, one that needs a dynamic loader or shared
// libraries (the image has neither), or one built otherwise than `make
// build-platforms` builds (cgo, no -trimpath, without the nomsgpack tag).
// Go records no -ldflags under -trimpath, so the version stamp is checked
// by running the binary (test/image), not here.
func checkBinary(path string, data []byte, p v1.Platform) error {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s is not an ELF executable for %s: %w", path, platformString(p), err)
	}
	defer f.Close()
	if want, ok := elfMachines[p.Architecture]; !ok {
		return fmt.Errorf("%s: no ELF machine known for architecture %q", path, p.Architecture)
	} else if f.Machine != want {
		return fmt.Errorf("%s is built for %s, not %s", path, f.Machine, platformString(p))
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (it asks for a program interpreter); the image has no libc: build it with CGO_ENABLED=0", path)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		return fmt.Errorf("%s needs shared libraries %v; the image has none: build it with CGO_ENABLED=0", path, libs)
	}
	bi, err := buildinfo.Read(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s carries no Go build information: %w", path, err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	for _, want := range [][2]string{{"GOOS", p.OS}, {"GOARCH", p.Architecture}, {"CGO_ENABLED", "0"}, {"-trimpath", "true"}} {
		if got := settings[want[0]]; got != want[1] {
			return fmt.Errorf("%s was built with %s=%q, want %q (build it with make build-platforms)", path, want[0], got, want[1])
		}
	}
	if !strings.Contains(" "+strings.ReplaceAll(settings["-tags"], ",", " ")+" ", " nomsgpack ") {
		return fmt.Errorf("%s was built with tags %q, without nomsgpack (build it with make build-platforms)", path, settings["-tags"])
	}
	return nil
}

func platformString(p v1.Platform) string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}
