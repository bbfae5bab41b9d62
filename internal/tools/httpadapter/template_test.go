package httpadapter

import (
	"net/url"
	"strings"
	"testing"
)

func TestParseTemplateRefusals(t *testing.T) {
	tests := map[string]string{
		"placeholder in host":      "https://{{ tenant }}.example.test/x",
		"placeholder in port":      "https://api.example.test:{{ port }}/x",
		"placeholder in scheme":    "{{ scheme }}://api.example.test/x",
		"query string":             "https://api.example.test/x?city={{ city }}",
		"fragment":                 "https://api.example.test/x#{{ f }}",
		"userinfo":                 "https://user:pw@api.example.test/{{ id }}",
		"malformed placeholder":    "https://api.example.test/{{ city }",
		"placeholder with a space": "https://api.example.test/{{ ci ty }}",
		"not absolute":             "/weather/{{ city }}",
		"other scheme":             "ftp://api.example.test/{{ city }}",
		"no host":                  "https:///{{ city }}",
	}
	for name, tmpl := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseTemplate(tmpl); err == nil {
				t.Fatalf("ParseTemplate(%q) accepted", tmpl)
			}
		})
	}
}

func TestTemplateExpand(t *testing.T) {
	tmpl, err := ParseTemplate("https://API.example.test/weather/{{ city }}/day-{{day}}")
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.Host() != "api.example.test" || strings.Join(tmpl.Names(), ",") != "city,day" {
		t.Fatalf("host %q names %v", tmpl.Host(), tmpl.Names())
	}
	tests := []struct {
		city    any
		want    string
		wantErr bool
	}{
		{"Paris", "https://API.example.test/weather/Paris/day-1", false},
		{"São Paulo", "https://API.example.test/weather/S%C3%A3o%20Paulo/day-1", false},
		{"a/b", "", true}, // "/" only with allow_slash_in_path
		{"a%2Fb", "https://API.example.test/weather/a%252Fb/day-1", false},
		{"x?admin=1", "https://API.example.test/weather/x%3Fadmin=1/day-1", false},
		{"x#frag", "https://API.example.test/weather/x%23frag/day-1", false},
		{"%2e%2e", "https://API.example.test/weather/%252e%252e/day-1", false},
		{int64(42), "https://API.example.test/weather/42/day-1", false},
		{2.5, "https://API.example.test/weather/2.5/day-1", false},
		{true, "https://API.example.test/weather/true/day-1", false},
		{"..", "", true},
		{".", "", true},
		{"", "", true},
		{map[string]any{"a": 1}, "", true},
		{[]any{"a"}, "", true},
		{nil, "", true},
	}
	for _, tc := range tests {
		got, err := tmpl.Expand(map[string]any{"city": tc.city, "day": int64(1)})
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("Expand(%v) = %q, %v; want %q (error %v)", tc.city, got, err, tc.want, tc.wantErr)
		}
	}
	if _, err := tmpl.Expand(map[string]any{"city": "Paris"}); err == nil {
		t.Error("a missing binding was accepted")
	}
	// With allow_slash_in_path a value fills several segments, each escaped; none may be empty
	// or walk up.
	for _, tc := range []struct {
		city    string
		want    string
		wantErr bool
	}{
		{"eu/paris", "https://API.example.test/weather/eu/paris/day-1", false},
		{"eu/s o?x", "https://API.example.test/weather/eu/s%20o%3Fx/day-1", false},
		{"eu/../admin", "", true},
		{"eu/./x", "", true},
		{"eu//x", "", true},
		{"/x", "", true},
		{"x/", "", true},
	} {
		got, err := tmpl.expand(map[string]any{"city": tc.city, "day": int64(1)}, true)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("expand(%q, slashes) = %q, %v; want %q (error %v)", tc.city, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestExpandText(t *testing.T) {
	got, err := ExpandText("{{ a }}-{{b}}-x", map[string]any{"a": "1 2", "b": int64(3)})
	if err != nil || got != "1 2-3-x" {
		t.Fatalf("ExpandText = %q, %v", got, err)
	}
	if _, err := ExpandText("{{ missing }}", nil); err == nil {
		t.Fatal("missing binding accepted")
	}
}

// FuzzTemplateExpand checks that no value can move a request off its host or out of its path
// segment: the expanded URL parses, keeps the host, keeps the number of segments, and the
// segment decodes back to the value.
func FuzzTemplateExpand(f *testing.F) {
	for _, s := range []string{"Paris", "a/b", "../admin", "x?y=1", "#", "%00", "@evil.test", "\\..\\", "é", " ", "{{ x }}", "\r\n"} {
		f.Add(s)
	}
	tmpl, err := ParseTemplate("https://api.example.test/v1/items/{{ id }}/detail")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, v string) {
		out, err := tmpl.Expand(map[string]any{"id": v})
		if err != nil {
			return
		}
		u, err := url.Parse(out)
		if err != nil {
			t.Fatalf("expanded URL %q does not parse: %v", out, err)
		}
		if u.Host != "api.example.test" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			t.Fatalf("value %q moved the request: %q", v, out)
		}
		segs := strings.Split(u.EscapedPath(), "/")
		if len(segs) != 5 || segs[4] != "detail" {
			t.Fatalf("value %q changed the path's segments: %q", v, u.EscapedPath())
		}
		if dec, err := url.PathUnescape(segs[3]); err != nil || dec != v {
			t.Fatalf("segment %q decodes to %q, want %q", segs[3], dec, v)
		}
	})
}

// FuzzParseTemplate checks that any template that parses keeps its host under any binding.
func FuzzParseTemplate(f *testing.F) {
	for _, s := range []string{"https://a.test/{{ x }}", "https://a.test/{{x}}/{{ y }}", "http://a.test:8080/p/{{ x }}.json", "https://{{x}}.test/", "https://a.test/{{ x }"} {
		f.Add(s, "v")
	}
	f.Fuzz(func(t *testing.T, s, v string) {
		tmpl, err := ParseTemplate(s)
		if err != nil {
			return
		}
		b := map[string]any{}
		for _, n := range tmpl.Names() {
			b[n] = v
		}
		out, err := tmpl.Expand(b)
		if err != nil {
			return
		}
		u, err := url.Parse(out)
		if err != nil || normalizeHost(u.Hostname()) != tmpl.Host() || u.RawQuery != "" || u.User != nil {
			t.Fatalf("template %q with %q expanded to %q (host %q)", s, v, out, tmpl.Host())
		}
	})
}
