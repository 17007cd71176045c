package input

import (
	"errors"
	"testing"
)

func TestFormatDecode(t *testing.T) {
	errNewer := errors.New("written by a newer vgpu-probe")
	f := Format{File: "a test file", Version: "test format version", Newest: 2, Newer: errNewer}
	type file struct {
		Version int `json:"version"`
		N       int `json:"n"`
	}
	decode := func(f Format, b string) (file, error) {
		var v file
		err := f.Decode("t.json", []byte(b), &v, func() int { return v.Version }, func() error {
			var c Check
			c.Count("n", v.N)
			return c.Err()
		})
		return v, err
	}
	for _, tc := range []struct{ in, want string }{
		{`{"version":2,"n":3}`, ""},
		{`[1]`, "t.json: not a test file: json: cannot unmarshal array into Go value of type input.file"},
		{`{"version":3}`, "t.json: test format version 3: written by a newer vgpu-probe (this one reads up to 2)"},
		{`{"n":3}`, "t.json: not a test file (no version)"},
		{`{"version":1,"n":-1}`, "t.json: n = -1, want 0 to 1.048576e+06"},
	} {
		v, err := decode(f, tc.in)
		switch {
		case tc.want == "" && (err != nil || v.N != 3):
			t.Errorf("%s: %+v, %v", tc.in, v, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("%s: %v, want %q", tc.in, err, tc.want)
		}
	}
	if _, err := decode(f, `{"version":9}`); !errors.Is(err, errNewer) {
		t.Errorf("a newer version: %v does not wrap Newer", err)
	}
	f.Unnamed = "no version or mode"
	if _, err := decode(f, `{}`); err == nil || err.Error() != "t.json: not a test file (no version or mode)" {
		t.Errorf("Unnamed: %v", err)
	}
}
