package app

import (
	"encoding/json"
	"fmt"

	opaversion "github.com/open-policy-agent/opa/v1/version"
	"github.com/spf13/cobra"

	"github.com/quantumnode/qn-admission/internal/version"
)

// versionInfo is what qnctl version prints: the build (stamped by the
// Makefile, see internal/version) and the OPA release that evaluates Rego.
type versionInfo struct {
	version.Info
	OPA string `json:"opa"`
}

func buildVersion() versionInfo {
	return versionInfo{Info: version.Get(), OPA: "v" + opaversion.Version}
}

// text is the two lines of qnctl version and qnctl --version.
func (v versionInfo) text() string {
	return v.String("qnctl") + "\nOPA " + v.OPA + " (Rego v1)\n"
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
				_, err := fmt.Fprint(s.Out, v.text())
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
