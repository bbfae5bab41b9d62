package httpadapter

import (
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
)

// Redacted replaces a sensitive value wherever one would be shown or stored.
const Redacted = "[REDACTED]"

// sensitiveHeaders are the common secret-bearing headers, lower-case.
var sensitiveHeaders = map[string]bool{
	"authorization": true, "proxy-authorization": true, "cookie": true, "set-cookie": true,
	"x-api-key": true, "api-key": true, "apikey": true, "x-auth-token": true, "x-access-token": true,
	"x-csrf-token": true, "x-xsrf-token": true, "x-amz-security-token": true, "x-goog-api-key": true,
	"proxy-authenticate": true, "www-authenticate": false,
}

// sensitiveHeaderParts mark a header as secret-bearing anywhere in its name.
var sensitiveHeaderParts = []string{"token", "secret", "password", "api-key", "apikey", "session", "credential", "signature", "cookie"}

// IsSensitiveHeader reports whether a header name commonly carries a secret.
func IsSensitiveHeader(name string) bool {
	n := strings.ToLower(strings.TrimSpace(name))
	if v, ok := sensitiveHeaders[n]; ok {
		return v
	}
	for _, p := range sensitiveHeaderParts {
		if strings.Contains(n, p) {
			return true
		}
	}
	return false
}

// credentialSchemeRE matches a value that is an HTTP credential whatever header carries it:
// an auth scheme followed by a token ("Bearer sk-…", "Basic dXNlcjpw…").
var credentialSchemeRE = regexp.MustCompile(`(?i)^\s*(bearer|basic|digest|token|apikey|api-key|hmac|aws4-hmac-sha256|negotiate|ntlm)\s+\S`)

// LooksLikeCredential reports whether a header value is a credential on its face (an
// authorization scheme and a token), so a secret cannot slip in under an innocent header name.
func LooksLikeCredential(value string) bool { return credentialSchemeRE.MatchString(value) }

// ValidHeaderName reports whether name is a valid HTTP header field name (an RFC 9110 token).
func ValidHeaderName(name string) bool { return validHeaderName(name) }

// sensitiveKeys are payload keys that carry secrets, normalized (lower-case, no '_' or '-').
var sensitiveKeys = map[string]bool{
	"password": true, "passwd": true, "pass": true, "pwd": true, "secret": true, "token": true,
	"apikey": true, "accesstoken": true, "refreshtoken": true, "idtoken": true, "authtoken": true,
	"bearertoken": true, "sessiontoken": true, "clientsecret": true, "privatekey": true,
	"authorization": true, "cookie": true, "sessionid": true, "credential": true, "credentials": true,
	"apisecret": true, "secretkey": true, "accesskey": true, "secretaccesskey": true,
	"passphrase": true, "jwt": true,
}

var sensitiveKeySuffixes = []string{"password", "secret", "apikey", "accesstoken", "privatekey", "secretkey"}

// IsSensitiveKey reports whether a payload or query key commonly carries a secret. "max_tokens"
// is not one: the match is on whole normalized keys and a few telling suffixes.
func IsSensitiveKey(key string) bool {
	n := strings.NewReplacer("_", "", "-", "", ".", "", " ", "").Replace(strings.ToLower(key))
	if sensitiveKeys[n] {
		return true
	}
	for _, s := range sensitiveKeySuffixes {
		if strings.HasSuffix(n, s) {
			return true
		}
	}
	return false
}

// sensitivePaths lists the JSON paths (relative to v, "/"-joined) of sensitive keys in v.
func sensitivePaths(v any, path string) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			p := path + "/" + escapePointer(k)
			if IsSensitiveKey(k) {
				out = append(out, p)
			}
			out = append(out, sensitivePaths(e, p)...)
		}
	case []any:
		for i, e := range x {
			out = append(out, sensitivePaths(e, path+"/"+strconv.Itoa(i))...)
		}
	}
	return out
}

// RedactKeys returns a copy of v (decoded JSON) with the value of every secret-bearing key
// (IsSensitiveKey) replaced by Redacted, at any depth. Other values are shared, not copied.
func RedactKeys(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if IsSensitiveKey(k) {
				out[k] = Redacted
				continue
			}
			out[k] = RedactKeys(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = RedactKeys(e)
		}
		return out
	}
	return v
}

// escapePointer escapes a key for a JSON pointer (RFC 6901).
func escapePointer(k string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(k)
}

// scalarString formats a string, number or boolean for a URL.
func scalarString(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case int:
		return strconv.Itoa(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case json.Number:
		return x.String(), nil
	case nil:
		return "", errors.New("value is null")
	}
	return "", errors.New("value must be a string, number or boolean")
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int64:
		return float64(x), true
	case int:
		return float64(x), true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}

// minSecretPart is the shortest part of a credential cut out of an answer on its own: shorter
// ones ("Bearer", a scheme) would cut ordinary words.
const minSecretPart = 8

// credentialParts are the strings of a credential header's value that must not come back in a
// result: the value, and its token without the scheme ("Bearer sk-…" also as "sk-…").
func credentialParts(v string) []string {
	var out []string
	if v = strings.TrimSpace(v); len(v) >= minSecretPart {
		out = append(out, v)
	}
	if _, tok, ok := strings.Cut(v, " "); ok {
		if tok = strings.TrimSpace(tok); len(tok) >= minSecretPart {
			out = append(out, tok)
		}
	}
	return out
}

// scrubSecrets returns v (decoded JSON, or a string) with every occurrence of each of secrets
// replaced by Redacted, in keys and values at any depth: a credential the request carried, which
// the answer reflects, never reaches a result, the model or the log. With no secrets v is
// returned as it is.
func scrubSecrets(v any, secrets []string) any {
	if len(secrets) == 0 {
		return v
	}
	switch x := v.(type) {
	case string:
		for _, s := range secrets {
			x = strings.ReplaceAll(x, s, Redacted)
		}
		return x
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[scrubSecrets(k, secrets).(string)] = scrubSecrets(e, secrets)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = scrubSecrets(e, secrets)
		}
		return out
	}
	return v
}
