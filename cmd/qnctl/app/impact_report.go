package app

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// markdownRowsPerGroup bounds each group's table in a pull-request
// comment (GitHub keeps comments under 65,536 characters); -o json and
// text list every flip.
const markdownRowsPerGroup = 25

func writeImpact(w io.Writer, r *impactReport, output string) error {
	switch output {
	case outputJSON:
		js, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", js)
		return err
	case outputMarkdown:
		return writeImpactMarkdown(w, r)
	default:
		return writeImpactText(w, r)
	}
}

// totalsLine is "3 newly denied, 1 newly allowed" (every change, zeros
// included, so a reader sees what was looked for).
func totalsLine(totals map[string]int, bold bool) string {
	parts := make([]string, 0, len(changeOrder))
	for _, ch := range changeOrder {
		part := fmt.Sprintf("%d %s", totals[ch], ch)
		if bold && ch == changeNewlyDenied && totals[ch] > 0 {
			part = "**" + part + "**"
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

// groupTitle is "role default, package qn.ssh".
func groupTitle(g *impactGroup, quote func(string) string) string {
	kind := "package"
	if len(g.Packages) > 1 {
		kind = "packages"
	}
	quoted := make([]string, len(g.Packages))
	for i, p := range g.Packages {
		quoted[i] = quote(p)
	}
	role := g.Role
	if role == "" {
		role = "(none)"
	}
	return fmt.Sprintf("role %s, %s %s", quote(role), kind, strings.Join(quoted, ", "))
}

// groupTotals is the group's non-zero changes.
func groupTotals(g *impactGroup) string {
	var parts []string
	for _, ch := range changeOrder {
		if n := g.Totals[ch]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, ch))
		}
	}
	return strings.Join(parts, ", ")
}

// inputLine says what one input held and what of it was judged.
func inputLine(in *inputReport) string {
	what := "requests"
	if in.Kind == inputSnapshot || in.Kind == inputCluster {
		what = "QuantumNodes"
	}
	s := fmt.Sprintf("%s %s: %d %s judged", in.Kind, in.Source, in.Judged, what)
	for _, why := range slices.Sorted(mapsKeys(in.Skipped)) {
		s += fmt.Sprintf("; %d not judged: %s", in.Skipped[why], why)
	}
	if in.RecordedDiffers > 0 {
		s += fmt.Sprintf("; %d whose recorded answer differs from the base set's (the cluster ran other policies, another webhook refused, or windows held changes made before the log begins)", in.RecordedDiffers)
	}
	return s
}

func mapsKeys(m map[string]int) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// request is "CREATE edge/edge-1 by alice (groups ...) at T", or "stored
// edge/edge-1".
func (f *flip) request() string {
	obj := f.Name
	if f.Namespace != "" {
		obj = f.Namespace + "/" + f.Name
	}
	if f.Operation == "stored" {
		return "stored QuantumNode " + obj
	}
	s := fmt.Sprintf("%s %s by %q", f.Operation, obj, f.User)
	if len(f.Groups) > 0 {
		s += " (groups " + strings.Join(f.Groups, ", ") + ")"
	}
	if f.Time != nil {
		s += " at " + f.Time.UTC().Format(time.RFC3339Nano)
	}
	return s
}

// answer is one side in a line: "allowed (200)" or "DENIED (403): msg".
func (s impactSide) answer() string {
	if s.Allowed {
		if s.Code == 0 {
			return "compliant"
		}
		return fmt.Sprintf("allowed (%d)", s.Code)
	}
	return fmt.Sprintf("DENIED (%d): %s", s.Code, s.Message)
}

func writeImpactText(w io.Writer, r *impactReport) error {
	tw := &textWriter{w: w}
	tw.line(fmt.Sprintf("proposed %s (revision %s) against base %s (revision %s)", r.Proposed.Source, r.Proposed.Revision, r.Base.Source, r.Base.Revision))
	for _, in := range r.Inputs {
		tw.line("  " + inputLine(in))
	}
	tw.line(totalsLine(r.Totals, false))
	for _, g := range r.Groups {
		tw.line("")
		tw.line(fmt.Sprintf("%s: %s", groupTitle(g, func(s string) string { return s }), groupTotals(g)))
		for i := range g.Flips {
			f := &g.Flips[i]
			tw.line(fmt.Sprintf("  %s  %s  [%s]", strings.ToUpper(strings.Join(f.Changes, ", ")), f.request(), f.Source))
			writeSides(tw, f)
		}
	}
	return tw.err
}

// writeSides prints what changed between the two answers.
func writeSides(tw *textWriter, f *flip) {
	tw.field("  base", f.Base.answer())
	tw.field("  proposed", f.Proposed.answer())
	if slices.Contains(f.Changes, changeWarnings) {
		tw.field("  warnings", "base: "+orNone(f.Base.Warnings)+"\nproposed: "+orNone(f.Proposed.Warnings))
	}
	if slices.Contains(f.Changes, changePatch) {
		tw.field("  patch", "base: "+orNoPatch(f.Base.Patch)+"\nproposed: "+orNoPatch(f.Proposed.Patch))
	}
}

func orNone(list []string) string {
	if len(list) == 0 {
		return "none"
	}
	return strings.Join(list, "; ")
}

func orNoPatch(p json.RawMessage) string {
	if len(p) == 0 {
		return "none"
	}
	return string(p)
}

func writeImpactMarkdown(w io.Writer, r *impactReport) error {
	var b strings.Builder
	code := func(s string) string { return "`" + strings.ReplaceAll(s, "`", "'") + "`" }
	fmt.Fprintf(&b, "### qn-admission policy impact\n\n")
	fmt.Fprintf(&b, "Proposed %s (revision %s) against base %s (revision %s): %s.\n\n",
		code(r.Proposed.Source), code(r.Proposed.Revision), code(r.Base.Source), code(r.Base.Revision), totalsLine(r.Totals, true))
	b.WriteString("| input | judged | not judged |\n|---|---:|---|\n")
	for _, in := range r.Inputs {
		var skipped []string
		for _, why := range slices.Sorted(mapsKeys(in.Skipped)) {
			skipped = append(skipped, fmt.Sprintf("%d %s", in.Skipped[why], why))
		}
		if in.RecordedDiffers > 0 {
			skipped = append(skipped, fmt.Sprintf("(%d recorded answers differ from the base set's)", in.RecordedDiffers))
		}
		fmt.Fprintf(&b, "| %s %s | %d | %s |\n", in.Kind, cell(code(in.Source)), in.Judged, cell(strings.Join(skipped, "; ")))
	}
	if len(r.Groups) == 0 {
		b.WriteString("\nNo answer changes.\n")
	}
	for _, g := range r.Groups {
		fmt.Fprintf(&b, "\n#### %s: %s\n\n", groupTitle(g, code), groupTotals(g))
		b.WriteString("| change | request | base | proposed |\n|---|---|---|---|\n")
		for i := range g.Flips {
			if i == markdownRowsPerGroup {
				fmt.Fprintf(&b, "\n…and %d more (`qnctl impact -o json` lists every one).\n", len(g.Flips)-i)
				break
			}
			f := &g.Flips[i]
			base, proposed := f.Base.answer(), f.Proposed.answer()
			if slices.Contains(f.Changes, changeWarnings) {
				base += "; warnings: " + orNone(f.Base.Warnings)
				proposed += "; warnings: " + orNone(f.Proposed.Warnings)
			}
			if slices.Contains(f.Changes, changePatch) {
				base += "; patch: " + orNoPatch(f.Base.Patch)
				proposed += "; patch: " + orNoPatch(f.Proposed.Patch)
			}
			fmt.Fprintf(&b, "| %s | %s<br>%s | %s | %s |\n", strings.Join(f.Changes, ", "), cell(f.request()), cell(code(f.Source)), cell(base), cell(proposed))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// maxCell bounds a table cell: a message can quote a whole object.
const maxCell = 400

// cell makes s safe inside a Markdown table cell.
func cell(s string) string {
	s = printable(strings.NewReplacer("|", `\|`, "\n", " ", "\r", " ").Replace(s))
	if len(s) > maxCell {
		s = strings.ToValidUTF8(s[:maxCell], "") + "…"
	}
	return s
}
