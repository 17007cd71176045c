package decide

import (
	"math"
	"testing"
)

func times(ts ...float64) Times {
	out := Times{}
	for i, t := range ts {
		out[i] = t
	}
	return out
}

// The test counts a repetition only where every arm ran, a win only
// below every other by the margin, and is ahead only past Alpha.
func TestSign(t *testing.T) {
	for _, tc := range []struct {
		name          string
		x             Times
		others        []Times
		n, wins, loss int
		ahead, behind bool
	}{
		{"4 of 4 below both runs as it is", times(10, 10, 9.5, 10.5), []Times{times(70, 14.6, 16, 17), times(15, 16, 18, 44)}, 4, 4, 0, true, false},
		{"3 of 3: too few against two", times(10, 10, 10), []Times{times(15, 15, 15), times(15, 15, 15)}, 3, 3, 0, false, false},
		{"5 of 5 against one", times(1, 1, 1, 1, 1), []Times{times(2, 2, 2, 2, 2)}, 5, 5, 0, false, false},
		{"6 of 6 against one", times(1, 1, 1, 1, 1, 1), []Times{times(2, 2, 2, 2, 2, 2)}, 6, 6, 0, true, false},
		{"within the margin is no win", times(0.995, 0.995, 0.995, 0.995), []Times{times(1, 1, 1, 1), times(1, 1, 1, 1)}, 4, 0, 0, false, false},
		{"slower than both every time", times(1.07, 1.07, 1.07, 1.08), []Times{times(1, 1, 1, 1), times(1.01, 1, 0.99, 1)}, 4, 0, 4, false, true},
		{"a repetition missing an arm is left out", times(1, 1, 1, 1, 1), []Times{times(2, 2, 2, 2), times(2, 2, 2, 2, 2)}, 4, 4, 0, true, false},
	} {
		s := Test(tc.x, tc.others, 0.01)
		if s.N != tc.n || s.Wins != tc.wins || s.Losses != tc.loss || s.Ahead() != tc.ahead || s.Behind() != tc.behind {
			t.Errorf("%s: %+v ahead %v behind %v p %.4f", tc.name, s, s.Ahead(), s.Behind(), s.P())
		}
	}
	for _, tc := range []struct {
		n, others int
		want      bool
	}{{3, 2, false}, {4, 2, true}, {5, 1, false}, {6, 1, true}, {0, 2, false}} {
		if got := (Sign{N: tc.n, P0: 1 / float64(1+tc.others)}).Decisive(); got != tc.want {
			t.Errorf("%d repetitions against %d: decisive %v", tc.n, tc.others, got)
		}
	}
	if p := tail(4, 4, 1.0/3); math.Abs(p-1.0/81) > 1e-12 {
		t.Errorf("P(4 of 4 at 1/3) = %v", p)
	}
	if p := tail(6, 5, 0.5); math.Abs(p-7.0/64) > 1e-12 {
		t.Errorf("P(>=5 of 6 at 1/2) = %v", p)
	}
}

// The fastest mode by median is ahead only where it beat every other in
// enough repetitions: a lead made by one slow repetition of the others is
// not.
func TestFastest(t *testing.T) {
	l := Fastest(map[string]Times{"spin": times(3, 3.1, 2.9, 3, 3.2), "block": times(2, 2.1, 2, 1.9, 2), "hybrid": times(2.5, 2.4, 2.6, 2.5, 2.5)})
	if l.Best != "block" || l.Next != "hybrid" || math.Abs(l.Margin-0.25) > 1e-9 || !l.Ahead() || l.Sign.Wins != 5 {
		t.Errorf("clear lead: %+v", l)
	}
	l = Fastest(map[string]Times{"block": times(2, 2, 2.2, 2, 2), "hybrid": times(1.9, 2.1, 2.1, 1.9, 2.2)})
	if l.Best != "block" || l.Ahead() {
		t.Errorf("a lead within the repetitions' spread: %+v", l)
	}
	if l := Fastest(map[string]Times{"block": times(2)}); l.Best != "block" || l.Next != "" || l.Ahead() {
		t.Errorf("one mode: %+v", l)
	}
}
