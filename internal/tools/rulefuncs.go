package tools

import (
	"math"
	"net/mail"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
	"golang.org/x/net/idna"
	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// This file is the rule helpers: CEL functions for the comparisons that conditions written with
// plain string functions get wrong (README, "Comparing safely"):
//
//	fold(s)        s case-folded for comparing: Unicode case folding and compatibility
//	               normalization (NFKC), invisible formatting characters dropped
//	emailDomain(s) the domain of the e-mail address s, lowercase, an internationalized one in
//	               its Unicode form (xn-- labels decoded), without a trailing dot
//	urlHost(s)     the host of the absolute URL s, as emailDomain writes a domain (an IP
//	               address in its canonical form); no userinfo, no port
//	num(x)         x as a number (double): an int, a uint, a finite double, or a string that
//	               is a plain decimal number ("500", "-2.5", "1e3"; surrounding spaces allowed)
//
// Each is safe on hostile input: it never panics, bounds what it reads, and answers an error for
// anything it cannot read for certain (a list of addresses, a relative URL, a backslash, "NaN",
// a value of another type). An error stops the rule's evaluation and the call is asked about,
// as for any rule that fails (gate.go): a helper never lets a call through by failing.

// Bounds on what the helpers read: past them the input is refused (an error).
const (
	maxFoldBytes  = 1 << 20
	maxEmailBytes = 1024
	maxURLBytes   = 8192
	maxNumBytes   = 64
)

// ruleHelpers declares the helpers in the rules' environment.
func ruleHelpers() cel.EnvOption {
	str := []*cel.Type{cel.StringType}
	return cel.Lib(ruleLib{
		cel.Function("fold", cel.Overload("parley_fold_string", str, cel.StringType, cel.UnaryBinding(guarded("fold", foldVal)))),
		cel.Function("emailDomain", cel.Overload("parley_email_domain_string", str, cel.StringType, cel.UnaryBinding(guarded("emailDomain", emailDomainVal)))),
		cel.Function("urlHost", cel.Overload("parley_url_host_string", str, cel.StringType, cel.UnaryBinding(guarded("urlHost", urlHostVal)))),
		cel.Function("num",
			cel.Overload("parley_num_string", str, cel.DoubleType, cel.UnaryBinding(guarded("num", numVal))),
			cel.Overload("parley_num_int", []*cel.Type{cel.IntType}, cel.DoubleType, cel.UnaryBinding(guarded("num", numVal))),
			cel.Overload("parley_num_uint", []*cel.Type{cel.UintType}, cel.DoubleType, cel.UnaryBinding(guarded("num", numVal))),
			cel.Overload("parley_num_double", []*cel.Type{cel.DoubleType}, cel.DoubleType, cel.UnaryBinding(guarded("num", numVal)))),
	})
}

// ruleLib is the helpers as a CEL library.
type ruleLib []cel.EnvOption

func (l ruleLib) CompileOptions() []cel.EnvOption   { return l }
func (ruleLib) ProgramOptions() []cel.ProgramOption { return nil }

// helperCosts charges each helper call, in CEL's cost units, for the input it reads (as CEL
// charges its own string functions: one unit per ten bytes), so the rules' cost limit bounds
// the helpers' work too.
func helperCosts() cel.ProgramOption {
	byLength := func(args []ref.Val, _ ref.Val) *uint64 {
		n := uint64(1)
		if len(args) == 1 {
			if s, ok := args[0].(types.String); ok {
				n += uint64(len(s)) / 10
			}
		}
		return &n
	}
	var opts []interpreter.CostTrackerOption
	for _, id := range []string{"parley_fold_string", "parley_email_domain_string", "parley_url_host_string", "parley_num_string"} {
		opts = append(opts, interpreter.OverloadCostTracker(id, byLength))
	}
	return cel.CostTrackerOptions(opts...)
}

// guarded runs a helper so that nothing it meets can crash the evaluation: a panic becomes the
// helper's error.
func guarded(name string, f func(ref.Val) ref.Val) func(ref.Val) ref.Val {
	return func(v ref.Val) (out ref.Val) {
		defer func() {
			if r := recover(); r != nil {
				out = types.NewErr("%s: the value could not be read", name)
			}
		}()
		return f(v)
	}
}

// stringArg is v as a string within max bytes of valid UTF-8, or the helper's error.
func stringArg(name string, v ref.Val, max int) (string, ref.Val) {
	s, ok := v.(types.String)
	if !ok {
		return "", types.NewErr("%s: expects a string, not %s", name, typeName(v))
	}
	if len(s) > max {
		return "", types.NewErr("%s: the value is longer than %d bytes", name, max)
	}
	if !utf8.ValidString(string(s)) {
		return "", types.NewErr("%s: the value is not valid UTF-8", name)
	}
	return string(s), nil
}

// Fold is the comparison form of s (the rules' fold): NFKC, Unicode case folding (full: "ß"
// folds to "ss"), NFKC again, without the invisible formatting characters (zero-width spaces
// and joiners, soft hyphens, bidirectional controls, variation selectors).
func Fold(s string) string {
	s = norm.NFKC.String(s)
	s = cases.Fold().String(s) // a Caser keeps state: one per call
	s = strings.Map(func(r rune) rune {
		if unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) || unicode.Is(unicode.Variation_Selector, r) {
			return -1
		}
		return r
	}, s)
	return norm.NFKC.String(s)
}

func foldVal(v ref.Val) ref.Val {
	s, err := stringArg("fold", v, maxFoldBytes)
	if err != nil {
		return err
	}
	return types.String(Fold(s))
}

// canonicalDomain is a domain name as the helpers compare it: IDNA's lookup mapping (UTS 46:
// case, width, ignorable characters, the ideographic full stop), validated, then written in
// Unicode (xn-- labels decoded) and lowercase, without a trailing dot. Anything IDNA refuses is
// an error.
func canonicalDomain(d string) (string, bool) {
	d = strings.TrimSuffix(d, ".")
	if d == "" {
		return "", false
	}
	ascii, err := idna.Lookup.ToASCII(d)
	if err != nil || ascii == "" {
		return "", false
	}
	ascii = strings.TrimSuffix(ascii, ".") // a full stop IDNA mapped to a dot
	if ascii == "" || strings.HasSuffix(ascii, ".") || strings.Contains(ascii, "..") {
		return "", false
	}
	u, err := idna.Lookup.ToUnicode(ascii)
	if err != nil {
		return "", false
	}
	return strings.ToLower(u), true
}

// EmailDomain is the domain of the single e-mail address s (RFC 5322, as net/mail reads it: a
// display name and angle brackets allowed, a quoted local part may hold an "@"), canonical as
// canonicalDomain writes it; false when s is not one address with a domain name.
func EmailDomain(s string) (string, bool) {
	if len(s) > maxEmailBytes || !utf8.ValidString(s) {
		return "", false
	}
	a, err := mail.ParseAddress(s)
	if err != nil {
		return "", false
	}
	at := strings.LastIndexByte(a.Address, '@')
	if at <= 0 || at == len(a.Address)-1 {
		return "", false
	}
	d := a.Address[at+1:]
	if strings.HasPrefix(d, "[") { // a domain literal ([192.0.2.1]): not a name to compare
		return "", false
	}
	return canonicalDomain(d)
}

func emailDomainVal(v ref.Val) ref.Val {
	s, err := stringArg("emailDomain", v, maxEmailBytes)
	if err != nil {
		return err
	}
	d, ok := EmailDomain(s)
	if !ok {
		return types.NewErr("emailDomain: the value is not a single e-mail address with a domain name")
	}
	return types.String(d)
}

// URLHost is the host of the absolute URL s (a scheme and an authority: "https://…"), without
// userinfo or port: an IP address in its canonical form, a name as canonicalDomain writes it.
// False for anything else, and for a URL that parsers disagree on: one with a backslash, a space
// or a control character.
func URLHost(s string) (string, bool) {
	if len(s) > maxURLBytes || !utf8.ValidString(s) {
		return "", false
	}
	for _, r := range s {
		if r == '\\' || unicode.IsSpace(r) || unicode.IsControl(r) {
			return "", false
		}
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || u.Opaque != "" || u.Host == "" {
		return "", false
	}
	h := u.Hostname()
	if h == "" {
		return "", false
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		return ip.Unmap().WithZone("").String(), true
	}
	if strings.ContainsAny(h, "[]%:@") {
		return "", false
	}
	return canonicalDomain(h)
}

func urlHostVal(v ref.Val) ref.Val {
	s, err := stringArg("urlHost", v, maxURLBytes)
	if err != nil {
		return err
	}
	h, ok := URLHost(s)
	if !ok {
		return types.NewErr("urlHost: the value is not an absolute URL with a host")
	}
	return types.String(h)
}

// decimalRe is a plain decimal number: JSON's number syntax.
var decimalRe = regexp.MustCompile(`^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$`)

// Num is x as a finite number: an int, a uint, a double, or a string holding a plain decimal
// number (JSON's syntax, surrounding spaces allowed; no "0x", "1_000", "Inf" or "NaN").
func Num(x any) (float64, bool) {
	var f float64
	switch v := x.(type) {
	case int64:
		f = float64(v)
	case uint64:
		f = float64(v)
	case float64:
		f = v
	case string:
		t := strings.TrimSpace(v)
		if len(t) > maxNumBytes || !decimalRe.MatchString(t) {
			return 0, false
		}
		var err error
		if f, err = strconv.ParseFloat(t, 64); err != nil {
			return 0, false
		}
	default:
		return 0, false
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

func numVal(v ref.Val) ref.Val {
	var x any
	switch t := v.(type) {
	case types.Int:
		x = int64(t)
	case types.Uint:
		x = uint64(t)
	case types.Double:
		x = float64(t)
	case types.String:
		if len(t) > maxNumBytes {
			return types.NewErr("num: the value is longer than %d bytes", maxNumBytes)
		}
		x = string(t)
	default:
		return types.NewErr("num: expects a number or a string, not %s", typeName(v))
	}
	f, ok := Num(x)
	if !ok {
		return types.NewErr("num: the value is not a finite decimal number")
	}
	return types.Double(f)
}
