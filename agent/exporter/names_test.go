package exporter

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"
	"github.com/rs/zerolog"
	"go.yaml.in/yaml/v3"
)

// Shipped beside the agent, and checked here against what it exports.
const (
	rulesFile     = "../prometheus/vgpu-probe.rules.yml"
	dashboardFile = "../grafana/vgpu-probe.json"
)

// vocabulary is the metric and label names a query may use.
type vocabulary struct{ metrics, labels map[string]bool }

var descName = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

// exported collects the names every collector describes (the GPU's and
// the error counter's too), with the series names of the histograms a
// real scrape shows, and the labels Prometheus adds.
func exported(t *testing.T) vocabulary {
	v := vocabulary{
		metrics: map[string]bool{"up": true},
		labels:  map[string]bool{"instance": true, "job": true, "le": true},
	}
	ch := make(chan *prometheus.Desc, 256)
	NewCollector(fixed{}, zerolog.Nop()).Describe(ch)
	(&GPUCollector{}).Describe(ch)
	Errors.Describe(ch)
	close(ch)
	for d := range ch {
		m := descName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read %s", d)
		}
		v.metrics[m[1]] = true
		for _, l := range strings.Split(m[2], ",") {
			if l != "" {
				v.labels[l] = true
			}
		}
	}
	p := expfmt.NewTextParser(pmodel.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(scrape(t, fleetSnapshot(1))))
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range fams {
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				v.metrics[name+s] = true
			}
		}
	}
	return v
}

type rulesDoc struct {
	Groups []struct {
		Rules []struct {
			Record, Alert, Expr string
			Labels              map[string]string
		}
	}
}

// TestRulesAndDashboardNames: every expression of the shipped rules and
// dashboard names only metrics the exporter exposes or the rules record,
// and only labels that exist; a renamed metric or label fails here.
func TestRulesAndDashboardNames(t *testing.T) {
	v := exported(t)
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules rulesDoc
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var exprs []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
			if r.Record != "" {
				v.metrics[r.Record] = true
			}
		}
	}
	if len(exprs) == 0 {
		t.Fatalf("no rules in %s", rulesFile)
	}
	b, err = os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	n := len(exprs)
	exprs = append(exprs, queriesOf(dash)...)
	if len(exprs) == n {
		t.Fatalf("no queries in %s", dashboardFile)
	}
	for _, e := range exprs {
		metrics, labels := promqlNames(e)
		if len(metrics) == 0 {
			t.Errorf("%q names no metric", e)
		}
		for _, m := range metrics {
			if !v.metrics[m] {
				t.Errorf("%q: metric %s is neither exported nor recorded", e, m)
			}
		}
		for _, l := range labels {
			if !v.labels[l] {
				t.Errorf("%q: label %s does not exist", e, l)
			}
		}
	}
}

// queriesOf returns the "expr" of every panel target and the "query" of
// every templating variable that queries Prometheus.
func queriesOf(doc any) []string {
	var out []string
	switch d := doc.(type) {
	case map[string]any:
		for k, x := range d {
			if s, ok := x.(string); ok && (k == "expr" || (k == "query" && strings.Contains(s, "("))) {
				out = append(out, s)
				continue
			}
			out = append(out, queriesOf(x)...)
		}
	case []any:
		for _, x := range d {
			out = append(out, queriesOf(x)...)
		}
	}
	return out
}

var (
	grafanaVar    = regexp.MustCompile(`\$__\w+`)
	labelValues   = regexp.MustCompile(`label_values\(([^,]*),\s*(\w+)\)`)
	matchers      = regexp.MustCompile(`\{([^}]*)\}`)
	matcherLabel  = regexp.MustCompile(`([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"`)
	grouping      = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	rangeSelector = regexp.MustCompile(`\[[^\]]*\]`)
	token         = regexp.MustCompile(`[0-9]+(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?(?:ms|[smhdwy])?|[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	keywords      = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "Inf", "NaN"}
)

// promqlNames returns the metric names and label names a PromQL
// expression uses: enough of the grammar for the shipped queries
// (selectors, aggregations with by/without, vector matching, functions,
// Grafana's variables and label_values).
func promqlNames(expr string) (metrics, labels []string) {
	e := grafanaVar.ReplaceAllString(expr, "5m")
	e = labelValues.ReplaceAllStringFunc(e, func(s string) string {
		m := labelValues.FindStringSubmatch(s)
		labels = append(labels, m[2])
		return m[1]
	})
	e = matchers.ReplaceAllStringFunc(e, func(s string) string {
		for _, m := range matcherLabel.FindAllStringSubmatch(s, -1) {
			labels = append(labels, m[1])
		}
		return " "
	})
	e = grouping.ReplaceAllStringFunc(e, func(s string) string {
		for _, l := range strings.Split(grouping.FindStringSubmatch(s)[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels = append(labels, l)
			}
		}
		return " "
	})
	e = rangeSelector.ReplaceAllString(e, " ")
	for _, m := range token.FindAllStringSubmatch(e, -1) {
		tok := m[0]
		if m[1] != "" || (tok[0] >= '0' && tok[0] <= '9') || slices.Contains(keywords, tok) {
			continue // a function or aggregation, a number, a keyword
		}
		metrics = append(metrics, tok)
	}
	return metrics, labels
}

// TestPromqlNames checks the extraction itself, so that a query it
// misreads cannot pass TestRulesAndDashboardNames unseen.
func TestPromqlNames(t *testing.T) {
	m, l := promqlNames(`topk(5, sum without (vcpu) (rate(a_total{domain=~"$domain",vcpu!="none"}[$__rate_interval])) / on (instance) group_left () b:c:rate5m > 1e6 and bool d) offset 5m`)
	if !slices.Equal(m, []string{"a_total", "b:c:rate5m", "d"}) {
		t.Errorf("metrics %v, want a_total b:c:rate5m d", m)
	}
	for _, want := range []string{"vcpu", "domain", "instance"} {
		if !slices.Contains(l, want) {
			t.Errorf("labels %v lack %s", l, want)
		}
	}
	m, l = promqlNames(`label_values(x_info{instance=~"$instance"}, domain)`)
	if !slices.Equal(m, []string{"x_info"}) || !slices.Contains(l, "domain") || !slices.Contains(l, "instance") {
		t.Errorf("label_values: metrics %v labels %v", m, l)
	}
}

// TestDashboardQueriesParse has promtool parse every panel query (as a
// recording rule, with Grafana's variables filled in).
func TestDashboardQueriesParse(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (.ci/setup-prometheus.sh installs it)")
	}
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, q := range queriesOf(dash) {
		if strings.HasPrefix(q, "label_values(") {
			continue // Grafana's, not PromQL
		}
		q = strings.NewReplacer("$__rate_interval", "5m", "$__range", "1h", "$instance", ".*", "$domain", ".*").Replace(q)
		fmt.Fprintf(&rules, "      - record: dashboard_query_%d\n        expr: %s\n", i, strconv.Quote(q))
	}
	f := filepath.Join(t.TempDir(), "dashboard.rules.yml")
	if err := os.WriteFile(f, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", f).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules: %v\n%s\n%s", err, out, rules.String())
	}
}
