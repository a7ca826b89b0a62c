package app

// The qnctl samples of README.md and docs/*.md are this file's output, so
// they cannot drift from the binary:
//
//   - a fenced block right after a line starting "<!-- sample: qnctl output"
//     holds commands ("$ qnctl ARGS" or "$ go run ./cmd/qnctl ARGS"), each
//     followed by what it prints (stdout and stderr, in the order written);
//     TestReadmeSamples runs each with qnctl's Main, the working directory
//     at the repository root, and compares;
//   - a fenced block right after "<!-- sample: file PATH" shows PATH, a file
//     of the repository, whole;
//   - docs/examples/my-policies is where README's walkthrough ends: the
//     bundled policies (rego/bundle) plus the walkthrough's own files and
//     its package routed in roles.yaml; docs/examples/node.yaml is its first
//     fixture case's object.
//
// What truly varies is masked, and only that: the duration that ends
// `qnctl test`'s summary line. Times, paths and counts come from the
// commands' flags (--time, --now) and from files of the repository. A line
// "..." in a sample stands for lines the sample leaves out; regenerating
// keeps as many lines before and after it. A sample that exits 2 (bad
// usage or input) is an error, as it would document a mistake, unless its
// marker says "each exits 2": then each of its commands must.
//
// `go test ./cmd/qnctl/app -run TestReadmeSamples -update` (make
// docs-samples) rewrites the samples, the example directory and the file
// blocks in place.

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	sigsyaml "sigs.k8s.io/yaml"
)

const (
	sampleOutputMarker = "<!-- sample: qnctl output"
	sampleFileMarker   = "<!-- sample: file "
	// sampleExits2 in an output marker: every command of the block exits 2.
	sampleExits2      = "each exits 2"
	regenerateSamples = "go test ./cmd/qnctl/app -run TestReadmeSamples -update (or make docs-samples) rewrites it"

	// The walkthrough of README.md ("A new rule, step by step").
	bundleDir          = "rego/bundle"
	examplePolicies    = "docs/examples/my-policies"
	exampleNode        = "docs/examples/node.yaml"
	walkthroughPackage = "qn.ssh"
	// walkthroughAfter is the package of the default role the walkthrough's
	// package is listed after.
	walkthroughAfter = "qn.quantumnode"
)

// repoRoot is the repository root, relative to this package.
const repoRoot = "../../.."

// sampleDocs are the markdown files whose samples are checked, relative to
// the repository root, which is root.
func sampleDocs(t *testing.T, root string) []string {
	t.Helper()
	docs, err := fs.Glob(os.DirFS(root), "docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"README.md"}, docs...)
}

// docBlock is a marked fenced block of a markdown file.
type docBlock struct {
	doc        string // markdown path from the repository root
	open, shut int    // 0-based line indices of the opening and closing fence
	file       string // a file sample: the file it shows; "" for qnctl output
	// badInput: the marker says its commands exit 2 (the sample shows
	// qnctl refusing an input); otherwise none may.
	badInput bool
}

func (b docBlock) where() string { return fmt.Sprintf("%s:%d", b.doc, b.open+1) }

// qnctlCommandLine matches a "$ " line that runs qnctl.
var qnctlCommandLine = regexp.MustCompile(`^\$ (go run \./cmd/qnctl|qnctl)( |$)`)

// markedBlocks finds the marked blocks of a markdown file and reports
// every fenced block that shows a qnctl command's output without a marker.
func markedBlocks(doc string, lines []string) ([]docBlock, []error) {
	var blocks []docBlock
	var errs []error
	marker := -1
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if strings.HasPrefix(line, sampleOutputMarker) || strings.HasPrefix(line, sampleFileMarker) {
			marker = i
			continue
		}
		if !strings.HasPrefix(line, "```") {
			continue
		}
		shut := i + 1
		for shut < len(lines) && !strings.HasPrefix(lines[shut], "```") {
			shut++
		}
		if shut == len(lines) {
			errs = append(errs, fmt.Errorf("%s:%d: a fenced block that never closes", doc, i+1))
			return blocks, errs
		}
		b := docBlock{doc: doc, open: i, shut: shut}
		switch {
		case marker == i-1 && strings.HasPrefix(lines[marker], sampleFileMarker):
			b.file = strings.Fields(strings.TrimPrefix(lines[marker], sampleFileMarker))[0]
			blocks = append(blocks, b)
		case marker == i-1:
			b.badInput = strings.Contains(lines[marker], sampleExits2)
			blocks = append(blocks, b)
		default:
			for _, l := range lines[i+1 : shut] {
				if qnctlCommandLine.MatchString(l) {
					errs = append(errs, fmt.Errorf("%s: a qnctl sample without a %q line before it, so no test checks its output", b.where(), sampleOutputMarker+" -->"))
					break
				}
			}
		}
		if marker >= 0 && marker != i-1 {
			errs = append(errs, fmt.Errorf("%s:%d: a sample marker not followed by a fenced block", doc, marker+1))
		}
		marker = -1
		i = shut
	}
	if marker >= 0 {
		errs = append(errs, fmt.Errorf("%s:%d: a sample marker not followed by a fenced block", doc, marker+1))
	}
	return blocks, errs
}

// sampleCommand is one "$ " line of a sample and what follows it.
type sampleCommand struct {
	line string   // as printed, without "$ "
	args []string // qnctl's arguments
	want []string // the printed output
}

// parseSample splits a sample's lines into commands.
func parseSample(body []string) ([]sampleCommand, error) {
	var cmds []sampleCommand
	for _, l := range body {
		if strings.HasPrefix(l, "$ ") {
			m := qnctlCommandLine.FindStringSubmatch(l)
			if m == nil {
				return nil, fmt.Errorf("%q: a sample runs qnctl only, as `$ qnctl ARGS` or `$ go run ./cmd/qnctl ARGS`", l)
			}
			args, err := shellWords(strings.TrimPrefix(l, m[0]))
			if err != nil {
				return nil, fmt.Errorf("%q: %v", l, err)
			}
			cmds = append(cmds, sampleCommand{line: strings.TrimPrefix(l, "$ "), args: args})
			continue
		}
		if len(cmds) == 0 {
			return nil, fmt.Errorf("%q comes before the first command: a sample opens with a `$ qnctl` line", l)
		}
		cmds[len(cmds)-1].want = append(cmds[len(cmds)-1].want, l)
	}
	if len(cmds) == 0 {
		return nil, fmt.Errorf("no `$ qnctl` line")
	}
	return cmds, nil
}

// shellWords splits a command line as a POSIX shell would for the plain
// words and quotes a sample uses; pipes, redirections and expansions are
// refused (the sample would not be what the test runs).
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '\'' || c == '"':
			end := strings.IndexByte(s[i+1:], c)
			if end < 0 {
				return nil, fmt.Errorf("unclosed quote %c", c)
			}
			quoted := s[i+1 : i+1+end]
			if c == '"' && strings.ContainsAny(quoted, "$`\\") {
				return nil, fmt.Errorf("expansions are not run by the sample test")
			}
			cur.WriteString(quoted)
			inWord = true
			i += end + 1
		case strings.IndexByte("|<>;&$`\\(){}*?#", c) >= 0:
			return nil, fmt.Errorf("%q: pipes, redirections, globs, comments and expansions are not run by the sample test; give files as arguments", c)
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// runSample runs one command as a reader would at the repository root.
func runSample(args []string) (int, []string) {
	// One stream for stdout and stderr, in write order, as a terminal
	// shows them (the commands write from one goroutine).
	var out bytes.Buffer
	code := Main(context.Background(), args, Streams{In: strings.NewReader(""), Out: &out, Err: &out})
	return code, strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
}

// testDuration is the time qnctl test's summary line ends with.
var testDuration = regexp.MustCompile(`^((?:PASS|FAIL|NOTHING RAN): .*) \((?:[0-9.]+(?:h|m|s|ms|µs|ns))+\)$`)

// maskVarying replaces what differs from run to run.
func maskVarying(line string) string {
	return testDuration.ReplaceAllString(line, "$1 (<duration>)")
}

// elided is the line a sample puts where it leaves lines out.
const elided = "..."

// sampleMatches compares a sample's output with the real one, "..." standing
// for one or more left-out lines.
func sampleMatches(want, got []string) bool {
	head, tail, cut := splitElided(want)
	if !cut {
		return slices.EqualFunc(want, got, func(a, b string) bool { return maskVarying(a) == maskVarying(b) })
	}
	if len(got) <= len(head)+len(tail) {
		return false
	}
	same := func(a, b []string) bool {
		return slices.EqualFunc(a, b, func(x, y string) bool { return maskVarying(x) == maskVarying(y) })
	}
	return same(head, got[:len(head)]) && same(tail, got[len(got)-len(tail):])
}

// regenerated is the real output as the sample shows it: as many lines
// before and after its "..." as it had.
func regenerated(want, got []string) []string {
	head, tail, cut := splitElided(want)
	if !cut || len(got) <= len(head)+len(tail) {
		return got
	}
	out := append([]string{}, got[:len(head)]...)
	out = append(out, elided)
	return append(out, got[len(got)-len(tail):]...)
}

func splitElided(want []string) (head, tail []string, cut bool) {
	i := slices.IndexFunc(want, func(l string) bool { return strings.TrimSpace(l) == elided })
	if i < 0 {
		return want, nil, false
	}
	return want[:i], want[i+1:], true
}

// readLines reads a text file as lines without the last newline.
func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func writeLines(t *testing.T, path string, lines []string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReadmeSamples checks (and with -update rewrites) every qnctl sample of
// README.md and docs/*.md against the real qnctl, and the files they use.
func TestReadmeSamples(t *testing.T) {
	t.Chdir(repoRoot)
	docs := sampleDocs(t, ".")

	// The blocks of every document, and which files the walkthrough shows.
	blocks := map[string][]docBlock{}
	var shown []string
	for _, doc := range docs {
		bs, errs := markedBlocks(doc, readLines(t, doc))
		for _, err := range errs {
			t.Error(err)
		}
		blocks[doc] = bs
		for _, b := range bs {
			if b.file != "" {
				shown = append(shown, b.file)
			}
		}
	}

	// The files first: the samples run on them.
	t.Run(examplePolicies, func(t *testing.T) { checkExamplePolicies(t, shown) })
	t.Run(exampleNode, checkExampleNode)

	for _, doc := range docs {
		lines := readLines(t, doc)
		changed := false
		// From the last block up, so a rewrite leaves the line numbers of
		// the blocks still to check as they are.
		for _, b := range slices.Backward(blocks[doc]) {
			var body []string
			t.Run(b.where(), func(t *testing.T) {
				if b.file != "" {
					body = checkFileBlock(t, b, lines)
				} else {
					body = checkOutputBlock(t, b, lines)
				}
			})
			if body != nil && *update {
				lines = slices.Concat(lines[:b.open+1], body, lines[b.shut:])
				changed = true
			}
		}
		if changed {
			writeLines(t, doc, lines)
		}
	}
}

// checkFileBlock compares a file block with its file; it returns the
// block's new body when it differs.
func checkFileBlock(t *testing.T, b docBlock, lines []string) []string {
	t.Helper()
	file := readLines(t, b.file)
	if slices.Equal(lines[b.open+1:b.shut], file) {
		return nil
	}
	if !*update {
		t.Errorf("%s shows %s, but not as it is (%s)\n%s", b.where(), b.file, regenerateSamples, lineDiff(lines[b.open+1:b.shut], file))
	}
	return file
}

// checkOutputBlock runs the commands of a block; it returns the block's
// new body when an output differs.
func checkOutputBlock(t *testing.T, b docBlock, lines []string) []string {
	t.Helper()
	cmds, err := parseSample(lines[b.open+1 : b.shut])
	if err != nil {
		t.Fatalf("%s: %v", b.where(), err)
	}
	var body []string
	differs := false
	for _, c := range cmds {
		code, got := runSample(c.args)
		switch {
		case b.badInput && code != exitBadInput:
			t.Errorf("%s: `%s` exits %d; the sample's marker says %q", b.where(), c.line, code, sampleExits2)
		case !b.badInput && code == exitBadInput:
			t.Errorf("%s: `%s` exits 2 (bad usage or input), but the sample's marker does not say %q:\n%s", b.where(), c.line, sampleExits2, strings.Join(got, "\n"))
		}
		body = append(body, "$ "+c.line)
		if sampleMatches(c.want, got) {
			body = append(body, c.want...)
			continue
		}
		differs = true
		newOut := regenerated(c.want, got)
		body = append(body, newOut...)
		if !*update {
			t.Errorf("%s: `%s` prints something else than the sample shows (%s); durations are masked\n%s", b.where(), c.line, regenerateSamples, lineDiff(c.want, newOut))
		}
	}
	if !differs {
		return nil
	}
	return body
}

// lineDiff shows two texts line by line: "-" the document, "+" the truth.
func lineDiff(doc, truth []string) string {
	// The longest common subsequence, enough for a few dozen lines.
	n, m := len(doc), len(truth)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if maskVarying(doc[i]) == maskVarying(truth[j]) {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var sb strings.Builder
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && maskVarying(doc[i]) == maskVarying(truth[j]):
			sb.WriteString("  " + doc[i] + "\n")
			i, j = i+1, j+1
		case j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]):
			sb.WriteString("+ " + truth[j] + "\n")
			j++
		default:
			sb.WriteString("- " + doc[i] + "\n")
			i++
		}
	}
	return sb.String()
}

// checkExamplePolicies holds docs/examples/my-policies equal to the bundled
// policies plus the walkthrough: its files shown in README.md and its
// package listed by the default role.
func checkExamplePolicies(t *testing.T, shown []string) {
	want := map[string][]byte{}
	err := filepath.WalkDir(bundleDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		want[filepath.ToSlash(strings.TrimPrefix(p, bundleDir+"/"))] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	roles, line, err := routeWalkthroughPackage(want["roles.yaml"])
	if err != nil {
		t.Fatalf("%s/roles.yaml: %v", bundleDir, err)
	}
	want["roles.yaml"] = roles
	if readme, err := os.ReadFile("README.md"); err != nil {
		t.Fatal(err)
	} else if !bytes.Contains(readme, []byte("`"+line+"`")) {
		t.Errorf("README.md's walkthrough should tell to write `%s` in roles.yaml (step 2, Route it), as %s/roles.yaml does", line, examplePolicies)
	}
	own := map[string]bool{}
	for _, f := range shown {
		if rel, ok := strings.CutPrefix(f, examplePolicies+"/"); ok {
			if _, clash := want[rel]; clash {
				t.Errorf("%s: the walkthrough shows a file of %s; show files of its own", f, bundleDir)
			}
			own[rel] = true
		}
	}
	if len(own) == 0 {
		t.Errorf("no README block shows a file of %s (%s marker)", examplePolicies, sampleFileMarker+examplePolicies+"/... -->")
	}

	have := map[string]bool{}
	err = filepath.WalkDir(examplePolicies, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		have[filepath.ToSlash(strings.TrimPrefix(p, examplePolicies+"/"))] = true
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for rel := range own {
		if !have[rel] {
			t.Errorf("%s/%s is shown in README.md but does not exist", examplePolicies, rel)
		}
	}
	var names []string
	for rel := range want {
		names = append(names, rel)
	}
	sort.Strings(names)
	for _, rel := range names {
		path := filepath.Join(examplePolicies, rel)
		got, err := os.ReadFile(path)
		if err == nil && bytes.Equal(got, want[rel]) {
			continue
		}
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, want[rel], 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: missing: the example is %s plus the walkthrough (%s)", path, bundleDir, regenerateSamples)
		} else {
			t.Errorf("%s differs from %s/%s (roles.yaml: with %s routed): the example is the bundle plus the walkthrough (%s)\n%s",
				path, bundleDir, rel, walkthroughPackage, regenerateSamples, lineDiff(strings.Split(string(got), "\n"), strings.Split(string(want[rel]), "\n")))
		}
	}
	for rel := range have {
		if _, ok := want[rel]; ok || own[rel] {
			continue
		}
		path := filepath.Join(examplePolicies, rel)
		if *update {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s is neither in %s nor shown by README.md's walkthrough (%s removes it)", path, bundleDir, regenerateSamples)
	}
}

// routeWalkthroughPackage lists the walkthrough's package in the default
// role of a roles.yaml, right after walkthroughAfter, changing nothing else
// of the file; it returns the file and the new packages line.
func routeWalkthroughPackage(roles []byte) ([]byte, string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(roles, &doc); err != nil {
		return nil, "", err
	}
	var table struct {
		DefaultRole string `yaml:"defaultRole"`
	}
	if err := doc.Decode(&table); err != nil {
		return nil, "", err
	}
	packages := mappingValue(mappingValue(mappingValue(doc.Content[0], "roles"), table.DefaultRole), "packages")
	if packages == nil || packages.Kind != yaml.SequenceNode || packages.Style&yaml.FlowStyle == 0 {
		return nil, "", fmt.Errorf("the default role %q has no packages: [...] list on one line for the walkthrough to extend", table.DefaultRole)
	}
	var names []string
	for _, n := range packages.Content {
		names = append(names, n.Value)
	}
	at := slices.Index(names, walkthroughAfter)
	if at < 0 {
		return nil, "", fmt.Errorf("the default role %q does not list %s", table.DefaultRole, walkthroughAfter)
	}
	names = slices.Insert(names, at+1, walkthroughPackage)
	lines := strings.Split(string(roles), "\n")
	old := lines[packages.Line-1]
	open, shut := strings.Index(old, "["), strings.LastIndex(old, "]")
	if open < 0 || shut < open {
		return nil, "", fmt.Errorf("line %d: want packages: [...], found %q", packages.Line, old)
	}
	lines[packages.Line-1] = old[:open] + "[" + strings.Join(names, ", ") + "]" + old[shut+1:]
	return []byte(strings.Join(lines, "\n")), "packages: [" + strings.Join(names, ", ") + "]", nil
}

// mappingValue is the value of key in a YAML mapping node, or nil.
func mappingValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// checkExampleNode holds docs/examples/node.yaml equal to the object of the
// walkthrough's first fixture case, as README.md says it is.
func checkExampleNode(t *testing.T) {
	var fixture struct {
		Cases []struct {
			Object map[string]any `json:"object"`
		} `json:"cases"`
	}
	file := filepath.Join(examplePolicies, "fixtures", "ssh.yaml")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.Unmarshal(b, &fixture); err != nil || len(fixture.Cases) == 0 || fixture.Cases[0].Object == nil {
		t.Fatalf("%s: want cases whose first has an object (%v)", file, err)
	}
	var node map[string]any
	b, err = os.ReadFile(exampleNode)
	if err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.Unmarshal(b, &node); err != nil {
		t.Fatalf("%s: %v", exampleNode, err)
	}
	if !reflect.DeepEqual(node, fixture.Cases[0].Object) {
		t.Errorf("%s is not the object of %s's first case:\n%v\n%v", exampleNode, file, node, fixture.Cases[0].Object)
	}
}

// commandInCode matches a qnctl command named in a code span or a code
// block: the words after qnctl that name its (sub)command.
var commandInCode = regexp.MustCompile("(?:^|`|\\$ |\\| |run: |&& )(?:go run \\./cmd/)?qnctl((?: [a-z][a-z-]*)+)")

// commandPaths are qnctl's commands as `qnctl --help` lists them, with
// their subcommands ("rollout undo"); completion's shells are one command.
func commandPaths() map[string]bool {
	root := newCommand(Streams{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: &bytes.Buffer{}})
	root.InitDefaultCompletionCmd()
	paths := map[string]bool{}
	var walk func(c *cobra.Command, prefix string)
	walk = func(c *cobra.Command, prefix string) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" {
				continue
			}
			paths[prefix+sub.Name()] = true
			if sub.Name() != "completion" {
				walk(sub, prefix+sub.Name()+" ")
			}
		}
	}
	walk(root, "")
	return paths
}

// commandOf is the longest command path that words start with.
func commandOf(words []string, paths map[string]bool) string {
	for n := len(words); n > 0; n-- {
		if p := strings.Join(words[:n], " "); paths[p] {
			return p
		}
	}
	return ""
}

// TestReadmeListsEveryCommand holds README.md's table of qnctl commands
// equal to the commands qnctl has: a command added, renamed or removed
// without its row fails here.
func TestReadmeListsEveryCommand(t *testing.T) {
	paths := commandPaths()
	listed := map[string]bool{}
	for i, line := range readLines(t, filepath.Join(repoRoot, "README.md")) {
		// A row of the table of qnctl commands: | `qnctl eval FILE` | ... |
		if !strings.HasPrefix(line, "| `qnctl ") {
			continue
		}
		cell := strings.SplitN(strings.ReplaceAll(line, `\|`, "/"), "|", 3)[1]
		for _, m := range commandInCode.FindAllStringSubmatch(cell, -1) {
			words := strings.Fields(m[1])
			p := commandOf(words, paths)
			if p == "" {
				t.Errorf("README.md:%d lists `qnctl %s`, which qnctl does not have (qnctl --help)", i+1, words[0])
				continue
			}
			listed[p] = true
		}
	}
	for p := range paths {
		// A command group is listed by its subcommands.
		covered := listed[p]
		for l := range listed {
			covered = covered || strings.HasPrefix(l, p+" ")
		}
		if !covered {
			t.Errorf("qnctl %s has no row in README.md's table of qnctl commands (Writing and testing policies)", p)
		}
	}
}

// TestDocsNameOnlyRealCommands fails on a documented qnctl command that
// qnctl does not have (a `qnctl explain` in README.md, once).
func TestDocsNameOnlyRealCommands(t *testing.T) {
	paths := commandPaths()
	for _, doc := range sampleDocs(t, repoRoot) {
		inBlock := false
		for i, line := range readLines(t, filepath.Join(repoRoot, doc)) {
			if strings.HasPrefix(line, "```") {
				inBlock = !inBlock
				continue
			}
			for _, m := range commandInCode.FindAllStringSubmatch(line, -1) {
				// In prose only code spans name commands: "qnctl uses ..." does not.
				if !inBlock && !strings.Contains(m[0], "`") {
					continue
				}
				words := strings.Fields(m[1])
				if commandOf(words, paths) == "" {
					t.Errorf("%s:%d names `qnctl %s`, which qnctl does not have (qnctl --help)", doc, i+1, words[0])
				}
			}
		}
	}
}
