package tools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// evalRule compiles when as an ask rule and evaluates it on args (raw JSON): its verdict, or
// the evaluation's error (the agent asks about the call then).
func evalRule(t *testing.T, when, args string) (bool, error) {
	t.Helper()
	r, err := CompileRule(Rule{When: when, Action: RuleAsk})
	if err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	return r.eval(map[string]any{"args": ruleArgs(json.RawMessage(args)), "user": map[string]string{"id": "u", "name": "ann", "role": "member"}, "tool": "t"})
}

type ruleCase struct {
	when, args string
	want       bool
	err        bool // the evaluation fails (the call is asked about)
}

func checkRules(t *testing.T, cases []ruleCase) {
	t.Helper()
	for _, c := range cases {
		got, err := evalRule(t, c.when, c.args)
		switch {
		case c.err && err == nil:
			t.Errorf("%s on %s = %v, want an error", c.when, c.args, got)
		case !c.err && err != nil:
			t.Errorf("%s on %s: %v", c.when, c.args, err)
		case !c.err && got != c.want:
			t.Errorf("%s on %s = %v, want %v", c.when, c.args, got, c.want)
		}
	}
}

// TestEmailDomain: a rule on an address's domain written with plain string functions is dodged
// by case, a display name or a trailing dot; emailDomain reads the address as mail does.
func TestEmailDomain(t *testing.T) {
	checkRules(t, []ruleCase{
		// The slip: endsWith compares bytes.
		{`args.to.endsWith('@evil.test')`, `{"to": "boss@EVIL.test"}`, false, false},
		{`emailDomain(args.to) == 'evil.test'`, `{"to": "boss@EVIL.test"}`, true, false},
		{`emailDomain(args.to) == 'evil.test'`, `{"to": "Boss <boss@Evil.Test>"}`, true, false},
		{`emailDomain(args.to) == 'evil.test'`, `{"to": "boss@evil.test (the boss)"}`, true, false},
		// A quoted local part may hold an "@": the domain is after the last one.
		{`emailDomain(args.to) == 'evil.test'`, `{"to": "\"boss@good.test\"@evil.test"}`, true, false},
		{`emailDomain(args.to) == 'good.test'`, `{"to": "boss@good.test.evil.test"}`, false, false},
		{`emailDomain(args.to).endsWith('.evil.test') || emailDomain(args.to) == 'evil.test'`, `{"to": "a@MAIL.Evil.test"}`, true, false},
		// Internationalized names: Unicode, punycode, full-width forms and ignorable characters
		// are the same domain.
		{`emailDomain(args.to) == 'bücher.example'`, `{"to": "a@BÜCHER.example"}`, true, false},
		{`emailDomain(args.to) == 'bücher.example'`, `{"to": "a@xn--bcher-kva.example"}`, true, false},
		{`emailDomain(args.to) == 'evil.test'`, `{"to": "a@ｅｖｉｌ.test"}`, true, false},
		{`emailDomain(args.to) == 'evil.test'`, `{"to": "a@evil。test"}`, true, false},
		{`emailDomain(args.to) == 'evil.test'`, `{"to": "a@ev\u00adil.test"}`, true, false},
		// A look-alike is another domain (an allow-list, not a deny-list, catches those).
		{`emailDomain(args.to) == 'evil.test'`, `{"to": "a@еvil.test"}`, false, false},
		// Not one address with a domain name: the rule fails, and the call is asked about.
		{`emailDomain(args.to) == 'good.test'`, `{"to": "a@good.test, b@evil.test"}`, false, true},
		{`emailDomain(args.to) == 'good.test'`, `{"to": "nobody"}`, false, true},
		{`emailDomain(args.to) == 'good.test'`, `{"to": "a@"}`, false, true},
		{`emailDomain(args.to) == 'evil.test'`, `{"to": "boss@evil.test."}`, false, true}, // not an address mail reads
		{`emailDomain(args.to) == 'good.test'`, `{"to": "a@[192.0.2.1]"}`, false, true},
		{`emailDomain(args.to) == 'good.test'`, `{"to": "a@evil_host.test"}`, false, true},
		{`emailDomain(args.to) == 'good.test'`, `{"to": 5}`, false, true},
		{`emailDomain(args.to) == 'good.test'`, `{"to": ["a@good.test"]}`, false, true},
		{`emailDomain(args.to) == 'good.test'`, `{"to": "a@` + strings.Repeat("x", 2000) + `.test"}`, false, true},
	})
}

// TestURLHost: the host of a URL, whatever userinfo, port, case or escapes surround it; a URL
// parsers read differently (a backslash, a space) or one without a host is refused.
func TestURLHost(t *testing.T) {
	checkRules(t, []ruleCase{
		{`args.url.startsWith('https://good.test')`, `{"url": "https://good.test@evil.test/"}`, true, false}, // the slip
		{`urlHost(args.url) == 'good.test'`, `{"url": "https://good.test@evil.test/"}`, false, false},
		{`urlHost(args.url) == 'evil.test'`, `{"url": "https://good.test@evil.test/"}`, true, false},
		{`urlHost(args.url) == 'evil.test'`, `{"url": "https://user:pw@EVIL.test:8443/x?y#z"}`, true, false},
		{`urlHost(args.url) == 'evil.test'`, `{"url": "HTTP://Evil.Test./"}`, true, false},
		{`urlHost(args.url) == 'good.test'`, `{"url": "http://%65vil.test/"}`, false, true}, // escapes in a host: refused
		{`urlHost(args.url) == 'bücher.example'`, `{"url": "https://xn--bcher-kva.example/"}`, true, false},
		{`urlHost(args.url) == 'bücher.example'`, `{"url": "https://BÜCHER.example:443"}`, true, false},
		{`urlHost(args.url) == '::1'`, `{"url": "http://[0:0::1]:8080/"}`, true, false},
		{`urlHost(args.url) == '127.0.0.1'`, `{"url": "http://127.0.0.1/"}`, true, false},
		{`urlHost(args.url) == 'good.test'`, `{"url": "https://evil.test\\@good.test/"}`, false, true},
		{`urlHost(args.url) == 'good.test'`, `{"url": "https://good.test /"}`, false, true},
		{`urlHost(args.url) == 'good.test'`, `{"url": "https://good.test\u0000.evil.test/"}`, false, true},
		{`urlHost(args.url) == 'good.test'`, `{"url": "good.test/x"}`, false, true},
		{`urlHost(args.url) == 'good.test'`, `{"url": "//good.test/x"}`, false, true},
		{`urlHost(args.url) == 'good.test'`, `{"url": "mailto:a@good.test"}`, false, true},
		{`urlHost(args.url) == 'good.test'`, `{"url": "https://:80/"}`, false, true},
		{`urlHost(args.url) == 'good.test'`, `{"url": "https://good..test/"}`, false, true},
		{`urlHost(args.url) == 'good.test'`, `{"url": 42}`, false, true},
	})
}

// TestFold: case and width do not matter to fold, invisible characters neither; lowerAscii
// leaves everything but ASCII as it is.
func TestFold(t *testing.T) {
	checkRules(t, []ruleCase{
		{`args.s.lowerAscii() == 'évil'`, `{"s": "ÉVIL"}`, false, false}, // the slip
		{`fold(args.s) == 'évil'`, `{"s": "ÉVIL"}`, true, false},
		{`fold(args.s) == fold('STRASSE')`, `{"s": "straße"}`, true, false},
		{`fold(args.s) == 'evil'`, `{"s": "ＥＶＩＬ"}`, true, false},
		{`fold(args.s) == 'evil'`, `{"s": "ev\u200bil"}`, true, false},
		{`fold(args.s) == 'evil'`, `{"s": "e\u0301vil"}`, false, false},
		{`fold(args.s) == fold('évil')`, `{"s": "E\u0301VIL"}`, true, false},
		{`fold(args.s).contains('password')`, `{"s": "My PASSWORD is"}`, true, false},
		{`fold(args.s) == 'x'`, `{"s": 1}`, false, true},
	})
}

// TestNum: numbers given as strings compare as numbers; what is not plainly a finite decimal
// number is refused.
func TestNum(t *testing.T) {
	checkRules(t, []ruleCase{
		{`args.amount > '100'`, `{"amount": "99"}`, true, false}, // the slip: strings compare by bytes
		{`num(args.amount) > 100`, `{"amount": "99"}`, false, false},
		{`num(args.amount) > 100`, `{"amount": "500"}`, true, false},
		{`num(args.amount) > 100`, `{"amount": 500}`, true, false},
		{`num(args.amount) > 100`, `{"amount": 100.5}`, true, false},
		{`num(args.amount) == 1000.0`, `{"amount": "1e3"}`, true, false}, // == takes a double: 1000.0
		{`num(args.amount) == -2.5`, `{"amount": " -2.5 "}`, true, false},
		{`num(args.amount) > 100`, `{"amount": 18446744073709551615}`, true, false},
		{`num(args.amount) > 100`, `{"amount": "0x1F4"}`, false, true},
		{`num(args.amount) > 100`, `{"amount": "1_000"}`, false, true},
		{`num(args.amount) > 100`, `{"amount": "NaN"}`, false, true},
		{`num(args.amount) > 100`, `{"amount": "Inf"}`, false, true},
		{`num(args.amount) > 100`, `{"amount": "1e400"}`, false, true},
		{`num(args.amount) > 100`, `{"amount": "500 EUR"}`, false, true},
		{`num(args.amount) > 100`, `{"amount": "+500"}`, false, true},
		{`num(args.amount) > 100`, `{"amount": ""}`, false, true},
		{`num(args.amount) > 100`, `{"amount": true}`, false, true},
		{`num(args.amount) > 100`, `{"amount": null}`, false, true},
		{`num(args.amount) > 100`, `{"amount": "` + strings.Repeat("9", 100) + `"}`, false, true},
	})
}

// TestRuleHelpersFailClosed: a helper that cannot read its argument stops the tool's rules at
// that rule (MatchRule reports the error, and the agent asks about the call) rather than letting
// a later allow match.
func TestRuleHelpersFailClosed(t *testing.T) {
	tool, err := New(Spec{Name: "send", Description: "send", Executor: Server, Approval: Auto,
		Parameters: json.RawMessage(`{"type":"object"}`),
		Func:       func(context.Context, Call, map[string]any) (any, error) { return nil, nil },
		Rules: []Rule{
			{When: "emailDomain(args.to) == 'evil.test'", Action: RuleDeny, Reason: "no"},
			{When: "true", Action: RuleAllow},
		}})
	if err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{`"a@good.test, boss@evil.test"`, `"boss@evil.test\\"`, `7`} {
		m, ok := tool.MatchRule(json.RawMessage(`{"to": `+to+`}`), RuleUser{})
		if !ok || m.Index != 0 || m.Err == nil {
			t.Errorf("to %s: match %+v %v, want rule 0's error", to, m, ok)
		}
	}
	if m, ok := tool.MatchRule(json.RawMessage(`{"to": "Boss <BOSS@EVIL.TEST>"}`), RuleUser{}); !ok || m.Index != 0 || m.Err != nil {
		t.Errorf("an evil address: match %+v %v, want the deny", m, ok)
	}
	if m, ok := tool.MatchRule(json.RawMessage(`{"to": "a@good.test"}`), RuleUser{}); !ok || m.Index != 1 || m.Err != nil {
		t.Errorf("a good address: match %+v %v, want the allow", m, ok)
	}
}

// TestRuleHelpersCostWhatTheyRead: a helper called over and over on a long value runs into the
// rules' cost limit (an error: the call is asked about) instead of running unbounded.
func TestRuleHelpersCostWhatTheyRead(t *testing.T) {
	long := strings.Repeat("A", 100_000)
	_, err := evalRule(t, `[1,2,3,4,5,6,7,8,9,10,11,12].all(i, fold(args.s) != 'x')`, `{"s": "`+long+`"}`)
	if err == nil || !strings.Contains(err.Error(), "cost") {
		t.Fatalf("twelve folds of 100 kB: %v, want the cost limit", err)
	}
	if ok, err := evalRule(t, `fold(args.s) != 'x'`, `{"s": "`+long+`"}`); err != nil || !ok {
		t.Fatalf("one fold of 100 kB: %v %v", ok, err)
	}
}

// FuzzRuleHelpers: no input makes a helper panic; each answers a value or an error.
func FuzzRuleHelpers(f *testing.F) {
	for _, s := range []string{"", "a@b", "a@b.c", "\"@\"@x.y", "http://[::1%25eth0]:1/", "http://a:b@c:d@e/", "https://xn--/",
		"https://xn--ls8h.la/", "a@xn--", "\xff\xfe", "1e-400", "-0", "０", "\u0130", "ǅ", "http://[", "a@\u200d.test", strings.Repeat("é", 600)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		Fold(s)
		EmailDomain(s)
		URLHost(s)
		Num(s)
		for _, when := range []string{`fold(args.s) == ''`, `emailDomain(args.s) == ''`, `urlHost(args.s) == ''`, `num(args.s) == 0.0`} {
			b, _ := json.Marshal(map[string]string{"s": s})
			_, _ = evalRule(t, when, string(b))
		}
	})
}
