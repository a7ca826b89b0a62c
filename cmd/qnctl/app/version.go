package app

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	opaversion "github.com/open-policy-agent/opa/v1/version"
	"github.com/spf13/cobra"
)

// releaseVersion is qnctl's release version, set at build time with
// -ldflags "-X github.com/quantumnode/qn-admission/cmd/qnctl/app.releaseVersion=v1.2.3";
// without it, the module version and VCS stamp of the build are shown.
var releaseVersion = ""

// versionInfo is what qnctl version prints.
type versionInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	BuildTime string `json:"buildTime,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	Go        string `json:"go"`
	Platform  string `json:"platform"`
	OPA       string `json:"opa"`
}

func buildVersion() versionInfo {
	v := versionInfo{Version: releaseVersion, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, OPA: "v" + opaversion.Version}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if v.Version == "" {
			v.Version = "unknown"
		}
		return v
	}
	if v.Version == "" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.BuildTime = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func newVersionCommand(s Streams) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "version",
		Short:   "Print qnctl's version, commit and the OPA version it evaluates Rego with",
		Example: "  qnctl version\n  qnctl version -o json",
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			v := buildVersion()
			switch output {
			case outputJSON:
				js, err := json.MarshalIndent(v, "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(s.Out, "%s\n", js)
				return err
			case outputText:
				line := "qnctl " + v.Version
				if v.Commit != "" {
					line += " (commit " + v.Commit
					if v.Modified {
						line += ", modified"
					}
					if v.BuildTime != "" {
						line += ", " + v.BuildTime
					}
					line += ")"
				}
				_, err := fmt.Fprintf(s.Out, "%s\n%s %s, OPA %s (Rego v1)\n", line, v.Go, v.Platform, v.OPA)
				return err
			default:
				return usagef("--output %q is not one of text, json", output)
			}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", outputText, "Output: text or json.")
	_ = cmd.RegisterFlagCompletionFunc("output", fixedCompletion(outputText, outputJSON))
	return cmd
}
