package cobrakit

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

type usageErr struct{ error }

func usage(err error) error { return usageErr{err} }

func tree() *cobra.Command {
	root := &cobra.Command{Use: "prog", SilenceErrors: true, SilenceUsage: true}
	root.PersistentFlags().String("data", "", "a global flag")
	grp := &cobra.Command{Use: "grp", Short: "a group"}
	leaf := &cobra.Command{Use: "leaf NAME", Short: "a leaf", Long: "What the leaf does.", Args: cobra.ExactArgs(1),
		RunE: func(*cobra.Command, []string) error { return nil }}
	leaf.Flags().Bool("force", false, "a local flag")
	grp.AddCommand(leaf)
	root.AddCommand(grp, NewCompletionCmd("prog", usage), NewGenDocsCmd("docs/prog.md"))
	WrapArgs(root, usage)
	return root
}

// Unknown subcommands, wrong argument counts and unknown shells are the
// CLI's usage errors; a group without an action prints its help.
func TestWrapArgs(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		usage bool
	}{
		{[]string{"grp", "nope"}, true},
		{[]string{"grp", "leaf"}, true},
		{[]string{"grp", "leaf", "a", "b"}, true},
		{[]string{"completion", "tcsh"}, true},
		{[]string{"grp", "leaf", "a"}, false},
		{[]string{"grp"}, false},
	} {
		root := tree()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(tc.args)
		err := root.Execute()
		var ue usageErr
		if got := errors.As(err, &ue); got != tc.usage {
			t.Errorf("%v: error %v, usage error %v; want %v", tc.args, err, got, tc.usage)
		}
		if len(tc.args) == 1 && !strings.Contains(out.String(), "leaf") {
			t.Errorf("%v: printed %q; want the group's help", tc.args, out.String())
		}
	}
}

// The reference names the program, lists visible commands with their
// local flags, and leaves out hidden ones and help.
func TestReference(t *testing.T) {
	var buf bytes.Buffer
	if err := Reference(&buf, tree()); err != nil {
		t.Fatal(err)
	}
	got := buf.String()
	for _, want := range []string{"# prog command reference", "`prog gen-docs`", "--data", "## prog grp leaf", "What the leaf does.", "--force", "prog completion bash"} {
		if !strings.Contains(got, want) {
			t.Errorf("reference lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"gen-docs FILE", "## prog help"} {
		if strings.Contains(got, not) {
			t.Errorf("reference has %q (hidden)", not)
		}
	}
}
