package dirwatch

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Fingerprint hashes the content a policy set is built from: every regular
// file below dir, by slash-separated relative path and content. Symlinks are
// followed, the root included, so a ConfigMap volume, a git-sync worktree and
// a plain copy of the same files have the same fingerprint.
//
// Entries whose name starts with "." are skipped at every level: kubelet's
// "..data" and "..<timestamp>" directories and git's ".git" and ".worktrees"
// would otherwise count the same files twice, or count history. A dangling
// symlink counts as absent, and a file that vanishes during the walk is
// skipped: either way the change that caused it triggers another look.
func Fingerprint(dir string) (string, error) {
	return FingerprintOf(dir, nil)
}

// Include says whether a file, by its slash-separated path relative to
// the directory, is one the caller reads. nil includes every file.
type Include func(rel string) bool

// FingerprintOf is Fingerprint of the files include names: a file it
// leaves out is never opened, nor even stat'ed unless it is a symlink (which
// may lead to a directory), so a directory holding 100,000 files that are
// not policies costs one listing of their names. Subdirectories are always
// walked, since included files may lie below them.
func FingerprintOf(dir string, include Include) (string, error) {
	return (&Fingerprinter{include: include}).fingerprint(dir, nil)
}

// Fingerprinter is FingerprintOf for a caller that looks at the same
// directory again and again (the watcher's polls, a sync-lag sample every
// second): it remembers each directory's listing with what include left
// in it, and lists a directory again only when its modification time,
// inode or size changed, which every entry added, removed or renamed in it
// does. Included files are stat'ed and hashed at every look as before, so
// a file rewritten in place is seen. Listing 100,000 names costs 40 ms of
// CPU; not listing them is what lets a large checkout sit idle.
//
// A listing taken within racyListing of its directory's last change is
// not remembered: a file system with coarse timestamps could change the
// directory again within the same tick. A Fingerprinter is safe for one
// goroutine at a time.
type Fingerprinter struct {
	include Include
	// listings are the directories met by the last look, by resolved path
	// and relative path (include may judge a file by where it is).
	listings map[listingKey]listing
	now      func() time.Time
}

// racyListing is how long after a directory's last change its listing is
// trusted to stay the same while its timestamps do.
const racyListing = 2 * time.Second

type listingKey struct{ abs, rel string }

// listing is one directory's entries that a look considers, and what the
// directory looked like when they were read.
type listing struct {
	stamp   dirStamp
	entries []fs.DirEntry
}

// dirStamp is what changes when a directory's entries change. ctime too,
// because a copy that keeps times (rsync -a, cp -p) sets mtime back, and
// nothing sets ctime back.
type dirStamp struct {
	dev, ino     uint64
	mtime, ctime int64
	size         int64
}

// NewFingerprinter returns a Fingerprinter of the files include names
// (nil: every file).
func NewFingerprinter(include Include) *Fingerprinter {
	return &Fingerprinter{include: include, listings: map[listingKey]listing{}, now: time.Now}
}

// Fingerprint is FingerprintOf(dir, include), listing again only the
// directories that changed since the last call.
func (f *Fingerprinter) Fingerprint(dir string) (string, error) {
	seen := map[listingKey]listing{}
	fp, err := f.fingerprint(dir, seen)
	if err == nil {
		// Directories no longer met (an old git-sync worktree) are
		// forgotten.
		f.listings = seen
	}
	return fp, err
}

// fingerprint walks dir, remembering listings in seen when it is not nil.
func (f *Fingerprinter) fingerprint(dir string, seen map[listingKey]listing) (string, error) {
	// Walk the resolved root so a git-sync swap during the walk cannot mix two
	// worktrees: we read one of them, or fail and retry.
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("resolve policy directory %s: %w", dir, err)
	}
	fi, err := os.Stat(root)
	if err != nil {
		return "", fmt.Errorf("policy directory %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("policy directory %s is not a directory", dir)
	}
	h := sha256.New()
	if err := f.hashTree(h, root, "", map[string]bool{root: true}, seen); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// list returns the entries of abs a look considers: directories, symlinks
// and the files include names, sorted by name; dot-entries are left out.
// With seen set, it reuses the last look's listing when the directory has
// not changed since, and records the listing in seen.
func (f *Fingerprinter) list(abs, rel string, seen map[listingKey]listing) ([]fs.DirEntry, error) {
	key := listingKey{abs, rel}
	var stamp dirStamp
	var stamped bool
	if seen != nil {
		stamp, stamped = stampOf(abs)
		if old, ok := f.listings[key]; ok && stamped && old.stamp == stamp {
			seen[key] = old
			return old.entries, nil
		}
	}
	all, err := os.ReadDir(abs)
	if err != nil {
		return nil, err
	}
	// A new slice: all's array would keep every name alive.
	var entries []fs.DirEntry
	for _, e := range all {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		if f.include != nil && !e.IsDir() && e.Type()&fs.ModeSymlink == 0 && !f.include(path.Join(rel, name)) {
			continue // a file nobody reads: not even its type matters
		}
		entries = append(entries, e)
	}
	// Trusted only once the directory has been quiet for racyListing,
	// and only if it did not change while it was listed.
	if stamped && time.Unix(0, max(stamp.mtime, stamp.ctime)).Add(racyListing).Before(f.now()) {
		if again, ok := stampOf(abs); ok && again == stamp {
			seen[key] = listing{stamp: stamp, entries: entries}
		}
	}
	return entries, nil
}

func stampOf(abs string) (dirStamp, bool) {
	fi, err := os.Stat(abs)
	if err != nil {
		return dirStamp{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return dirStamp{}, false
	}
	return dirStamp{dev: uint64(st.Dev), ino: st.Ino, mtime: fi.ModTime().UnixNano(), ctime: st.Ctim.Nano(), size: fi.Size()}, true
}

// hashTree writes one record per regular file below abs: the relative path,
// a NUL (which no file name contains, so records cannot be confused), and the
// file's own SHA-256 (other entries, such as a FIFO, by their type, never
// opened). ancestors holds the resolved directories on the current
// path, so a symlink that points back up is not followed forever.
func (f *Fingerprinter) hashTree(h hash.Hash, abs, rel string, ancestors map[string]bool, seen map[listingKey]listing) error {
	entries, err := f.list(abs, rel, seen)
	if err != nil {
		return fmt.Errorf("read policy directory %s: %w", abs, err)
	}
	for _, e := range entries { // sorted by name, so the order is stable
		name := e.Name()
		p := filepath.Join(abs, name)
		r := path.Join(rel, name)
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("policy file %s: %w", p, err)
		}
		switch {
		case fi.IsDir():
			real, err := filepath.EvalSymlinks(p)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return fmt.Errorf("resolve policy directory %s: %w", p, err)
			}
			if ancestors[real] {
				continue
			}
			ancestors[real] = true
			err = f.hashTree(h, real, r, ancestors, seen)
			delete(ancestors, real)
			if err != nil {
				return err
			}
		case f.include != nil && !f.include(r):
			// A symlink to something other than a directory, which no one
			// reads.
		case fi.Mode().IsRegular():
			// Only regular files are opened: reading a FIFO or a device
			// left in the directory would block or never end.
			sum, err := hashFile(p)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return fmt.Errorf("read policy file %s: %w", p, err)
			}
			fmt.Fprintf(h, "%s\x00%x\n", r, sum)
		default:
			// A FIFO, device or socket is never opened, but its arrival
			// is a change: the load that follows refuses it and says so,
			// where ignoring it would leave it unreported.
			fmt.Fprintf(h, "%s\x00%s\n", r, fi.Mode().Type())
		}
	}
	return nil
}

// hashContentLimit is the largest file whose content is hashed. No policy
// file is near it (a load refuses files over --max-policy-file-bytes); a
// larger file, say a sparse gigabyte left in the directory, is recorded by
// its size, modification time and inode instead of costing a second of
// CPU at every look. Any write to it still changes the fingerprint.
const hashContentLimit = 64 << 20

func hashFile(p string) ([]byte, error) {
	// O_NONBLOCK: a file swapped for a FIFO since its Stat must not make
	// the open wait for a writer (the look, and the reloads behind it,
	// would wait for good).
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	switch {
	case !fi.Mode().IsRegular():
		fmt.Fprintf(h, "not a regular file: %s", fi.Mode())
	case fi.Size() > hashContentLimit:
		var ino uint64
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		fmt.Fprintf(h, "large file: %d bytes, modified %d, inode %d", fi.Size(), fi.ModTime().UnixNano(), ino)
	default:
		if _, err := io.Copy(h, io.LimitReader(f, hashContentLimit+1)); err != nil {
			return nil, err
		}
	}
	return h.Sum(nil), nil
}
