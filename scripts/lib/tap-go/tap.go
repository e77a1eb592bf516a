// Package tap writes TAP version 13 (Test Anything Protocol) with the calls runtime-tools'
// validation programs make. scripts/runtime-tools builds it at the import path those
// programs use (github.com/mndrix/tap-go), because Debian does not package that library.
package tap

import (
	"fmt"
	"io"
	"os"
	"strings"

	"gopkg.in/yaml.v2"
)

// T numbers the test points written to Writer (standard output by default).
type T struct {
	next   *int // shared with the views Todo returns
	Writer io.Writer
	// TODO marks the following test points as TODO directives.
	TODO bool
}

// New returns a producer writing to standard output.
func New() *T {
	n := 1
	return &T{next: &n, Writer: os.Stdout}
}

// Todo returns a view of t whose test points are TODO; the numbering stays shared.
func (t *T) Todo() *T {
	v := *t
	v.TODO = true
	return &v
}

func (t *T) printf(format string, a ...interface{}) { fmt.Fprintf(t.Writer, format, a...) }

// Header writes the version line and, for a known count, the plan.
func (t *T) Header(count int) {
	t.printf("TAP version 13\n")
	if count > 0 {
		t.printf("1..%d\n", count)
	}
}

// Ok writes one test point.
func (t *T) Ok(pass bool, description string) {
	word := "ok"
	if !pass {
		word = "not ok"
	}
	directive := ""
	if t.TODO {
		directive = " # TODO"
	}
	t.printf("%s %d - %s%s\n", word, *t.next, description, directive)
	*t.next++
}

// Pass writes a passing test point.
func (t *T) Pass(description string) { t.Ok(true, description) }

// Fail writes a failing test point.
func (t *T) Fail(description string) { t.Ok(false, description) }

// Skip writes count skipped test points.
func (t *T) Skip(count int, description string) {
	for i := 0; i < count; i++ {
		t.printf("ok %d # SKIP %s\n", *t.next, description)
		*t.next++
	}
}

// Count is the number of test points written.
func (t *T) Count() int { return *t.next - 1 }

// AutoPlan writes the plan for the test points written so far.
func (t *T) AutoPlan() { t.printf("1..%d\n", t.Count()) }

// Diagnostic writes a comment line (newlines continue the comment).
func (t *T) Diagnostic(message string) {
	t.printf("# %s\n", strings.ReplaceAll(message, "\n", "\n# "))
}

// Diagnosticf is Diagnostic with formatting.
func (t *T) Diagnosticf(format string, a ...interface{}) { t.Diagnostic(fmt.Sprintf(format, a...)) }

// YAML writes message as an indented YAML block for the preceding test point.
func (t *T) YAML(message interface{}) error {
	b, err := yaml.Marshal(message)
	if err != nil {
		return err
	}
	t.printf("  ---\n")
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		t.printf("  %s\n", line)
	}
	t.printf("  ...\n")
	return nil
}
