package policies

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
)

// Defaults of LoadOptions' size bounds. Data is what costs: a data
// document becomes Go values, then Rego's, then the compiled store, about
// 90 times its JSON at the peak (a 1 MB data.json of small objects: 132
// MiB at start and 220 MiB across a reload under the chart's 192 MiB Go
// soft limit; 8 MB reached 500 MiB). So one file may hold what a ConfigMap
// holds in all (1 MiB), and a set four times that: Rego sources cost far
// less per byte. A git-sync directory that needs more raises the flags
// and the container's memory together.
const (
	DefaultMaxPolicyFileBytes = 1 << 20
	DefaultMaxPolicySetBytes  = 4 << 20
)

// dirFS reads a policy directory the one way every program does (the
// server's loads and reloads, qn-controller's, qnctl's): only regular
// files, a symlink only when it resolves to a regular file inside the
// directory, each file and the whole set bounded in size, and no open
// that can block (a FIFO named *.rego would otherwise stop a reload, and
// SIGTERM behind it, for good). Directories are listed as os.DirFS lists
// them. A file it refuses is an error that names the file and says why.
type dirFS struct {
	// dir is the directory as given, for messages; root is it resolved,
	// once, so every file read belongs to one checkout (LoadDir re-reads
	// when the content changed meanwhile).
	dir, root string
	maxFile   int64
	maxSet    int64
	// read counts the bytes read from every file so far, against maxSet.
	read atomic.Int64
}

// newDirFS returns the bounded reader of dir; limits of 0 take the
// defaults. A root that cannot be resolved is resolved at each open, so
// the error comes from the read that needs it.
func newDirFS(dir string, opts LoadOptions) *dirFS {
	d := &dirFS{dir: dir, root: dir, maxFile: opts.MaxFileBytes, maxSet: opts.MaxSetBytes}
	if d.maxFile <= 0 {
		d.maxFile = DefaultMaxPolicyFileBytes
	}
	if d.maxSet <= 0 {
		d.maxSet = DefaultMaxPolicySetBytes
	}
	// The root is absolute: a relative one (qnctl lint .) would make every
	// resolved path look outside it.
	if abs, err := filepath.Abs(dir); err == nil {
		d.root = abs
	}
	if real, err := filepath.EvalSymlinks(d.root); err == nil {
		d.root = real
	}
	return d
}

// errOutside refuses a path that resolves outside the directory; like
// every refusal it is wrapped in an fs.PathError naming the file.
var errOutside = errors.New("is a symlink that leads outside the policy directory; a policy directory's symlinks must stay inside it")

// resolve returns the real path of name and what it is, refusing a
// symlink that leaves the directory.
func (d *dirFS) resolve(op, name string) (string, fs.FileInfo, error) {
	if !fs.ValidPath(name) {
		return "", nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	real, err := filepath.EvalSymlinks(filepath.Join(d.root, filepath.FromSlash(name)))
	if err != nil {
		return "", nil, &fs.PathError{Op: op, Path: name, Err: unwrapPath(err)}
	}
	if real != d.root && !strings.HasPrefix(real, d.root+string(filepath.Separator)) {
		return "", nil, &fs.PathError{Op: op, Path: name, Err: fmt.Errorf("%w (%s)", errOutside, real)}
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", nil, &fs.PathError{Op: op, Path: name, Err: unwrapPath(err)}
	}
	return real, fi, nil
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// notRegular says what a path that is neither a file nor a directory is.
func notRegular(mode fs.FileMode) error {
	kind := "not a regular file"
	switch {
	case mode&fs.ModeNamedPipe != 0:
		kind = "a named pipe (FIFO)"
	case mode&fs.ModeCharDevice != 0:
		kind = "a character device"
	case mode&fs.ModeDevice != 0:
		kind = "a device"
	case mode&fs.ModeSocket != 0:
		kind = "a socket"
	case mode&fs.ModeIrregular != 0:
		kind = "an irregular file"
	}
	return fmt.Errorf("is %s, not a regular file; a policy directory is read only from regular files", kind)
}

// Open opens a directory for listing, or a regular file for a bounded
// read.
func (d *dirFS) Open(name string) (fs.File, error) {
	real, fi, err := d.resolve("open", name)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return os.Open(real)
	}
	if !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "open", Path: name, Err: notRegular(fi.Mode())}
	}
	// O_NONBLOCK: should the file have been swapped for a FIFO since the
	// Stat above, opening it does not wait for a writer; the Stat of what
	// was opened then refuses it.
	f, err := os.OpenFile(real, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: unwrapPath(err)}
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = notRegular(st.Mode())
	}
	if err == nil && st.Size() > d.maxFile {
		err = d.fileTooLarge(st.Size())
	}
	if err != nil {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return &boundedFile{File: f, fs: d, name: name, size: st.Size(), left: d.maxFile}, nil
}

func (d *dirFS) fileTooLarge(size int64) error {
	return fmt.Errorf("is %d bytes, over the limit of %d bytes for one policy file (--max-policy-file-bytes)", size, d.maxFile)
}

func (d *dirFS) setTooLarge() error {
	return fmt.Errorf("takes the policy set past its limit of %d bytes in all (--max-policy-set-bytes)", d.maxSet)
}

// ReadFile reads a whole file within the bounds, into one allocation of
// its size.
func (d *dirFS) ReadFile(name string) ([]byte, error) {
	f, err := d.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	bf, ok := f.(*boundedFile)
	if !ok {
		return nil, &fs.PathError{Op: "read", Path: name, Err: errors.New("is a directory")}
	}
	// One byte more than the size: a file that grew since its Stat is
	// read to the end, within the bounds.
	buf := make([]byte, 0, bf.size+1)
	for {
		n, err := bf.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
	}
}

// ReadDir lists a directory, sorted by name.
func (d *dirFS) ReadDir(name string) ([]fs.DirEntry, error) {
	real, fi, err := d.resolve("readdir", name)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: errors.New("not a directory")}
	}
	return os.ReadDir(real)
}

// Stat describes a path as Open would find it.
func (d *dirFS) Stat(name string) (fs.FileInfo, error) {
	_, fi, err := d.resolve("stat", name)
	return fi, err
}

// boundedFile is a regular policy file whose reads count against its own
// bound and the set's.
type boundedFile struct {
	*os.File
	fs   *dirFS
	name string
	size int64
	// left is what this file may still yield.
	left int64
}

func (f *boundedFile) Read(p []byte) (int, error) {
	if int64(len(p)) > f.left+1 {
		p = p[:f.left+1]
	}
	n, err := f.File.Read(p)
	if n > 0 {
		f.left -= int64(n)
		if f.left < 0 {
			return 0, &fs.PathError{Op: "read", Path: f.name, Err: fmt.Errorf("grew while it was read and %w", f.fs.fileTooLarge(f.fs.maxFile-f.left))}
		}
		if f.fs.read.Add(int64(n)) > f.fs.maxSet {
			return 0, &fs.PathError{Op: "read", Path: f.name, Err: f.fs.setTooLarge()}
		}
	}
	if err != nil && !errors.Is(err, io.EOF) {
		err = &fs.PathError{Op: "read", Path: f.name, Err: unwrapPath(err)}
	}
	return n, err
}

var (
	_ fs.ReadFileFS = (*dirFS)(nil)
	_ fs.ReadDirFS  = (*dirFS)(nil)
	_ fs.StatFS     = (*dirFS)(nil)
)
