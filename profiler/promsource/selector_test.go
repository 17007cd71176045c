package promsource

import (
	"strings"
	"testing"
	"time"
)

func TestParseSelector(t *testing.T) {
	for in, want := range map[string]string{
		"":                                     "{}",
		"{}":                                   "{}",
		` { job = "gpu" } `:                    `{job="gpu"}`,
		`{job="gpu",instance=~"rack1-.*",}`:    `{job="gpu", instance=~"rack1-.*"}`,
		`{job!='a"b', env!~` + "`pro|d`" + `}`: `{job!="a\"b", env!~"pro|d"}`,
		`{zone='it\'s'}`:                       `{zone="it's"}`,
		`{path="a,b}c"}`:                       `{path="a,b}c"}`,
	} {
		s, err := ParseSelector(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if s.String() != want {
			t.Errorf("%q: got %s, want %s", in, s, want)
		}
	}
}

func TestParseSelectorRefuses(t *testing.T) {
	for in, why := range map[string]string{
		`job="gpu"`:                "not in braces",
		`up{job="gpu"}`:            "not in braces",
		`{job="gpu"} or vector(1)`: "not in braces",
		`{job=gpu}`:                "quoted value",
		`{job="gpu}`:               "unterminated",
		`{job="gpu" env="x"}`:      "expected ','",
		`{1job="x"}`:               "label name",
		`{job=="x"}`:               "quoted value",
		`{job=~"(unclosed"}`:       "missing closing )",
		`{__name__="up"}`:          "__name__",
		`{job}`:                    "expected =",
		`{job="\q"}`:               "bad string",
	} {
		_, err := ParseSelector(in)
		if err == nil || !strings.Contains(err.Error(), why) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v, want one line with %q", in, err, why)
		}
	}
}

func TestParseRange(t *testing.T) {
	for in, want := range map[string]time.Duration{"30s": 30 * time.Second, "1h": time.Hour, "1d": 24 * time.Hour, "1h30m": 90 * time.Minute} {
		if d, err := ParseRange(in); err != nil || d != want {
			t.Errorf("%q: %v %v, want %v", in, d, err, want)
		}
	}
	for _, in := range []string{"", "0s", "-1h", "1x", "h", "1.5h", "0"} {
		if _, err := ParseRange(in); err == nil || !strings.Contains(err.Error(), "--range") {
			t.Errorf("%q: %v, want a --range error", in, err)
		}
	}
}

func TestQueriesCarryTheSelector(t *testing.T) {
	sel, _ := ParseSelector(`{job="gpu"}`)
	for _, e := range allQueries() {
		got := expand(e, sel, "5m", "1s")
		if strings.Contains(got, "$") || !strings.Contains(got, `{job="gpu"}[5m]`) && !strings.Contains(got, `{job="gpu"})[5m:1s]`) {
			t.Errorf("%s: expands to %s", e, got)
		}
	}
}

func allQueries() []string {
	var out []string
	for _, q := range threadQueries {
		out = append(out, q.expr)
	}
	for _, q := range targetQueries {
		out = append(out, q.expr)
	}
	for _, q := range metaQueries {
		out = append(out, q.expr)
	}
	return append(out, corunnerQuery, ageQuery)
}
