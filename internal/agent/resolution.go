package agent

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"parley/internal/fault"
	"parley/internal/tools"
)

// resolutionHint says what each kind of resolution looks like, for error messages.
const resolutionHint = `an approval takes {"decision":"approve"|"deny"}, a question {"action":"accept"|"decline"|"cancel"}, a browser tool {"result":{…}} or {"error":{"message":"…"}}`

// MaxReasonBytes bounds an approval decision's reason (UTF-8 bytes, as sent): one decision's or
// a bulk decision's, checked by Resolution.Kind.
const MaxReasonBytes = 2000

// CheckReason is the bound on a decision's reason: an invalid_args error at /reason when it is
// longer than MaxReasonBytes or holds a NUL.
func CheckReason(reason string) error {
	if len(reason) > MaxReasonBytes {
		return fault.InvalidAt("the reason is too long", "/reason", fmt.Sprintf("must be at most %d bytes", MaxReasonBytes))
	}
	if !Storable(reason) {
		return fault.InvalidField("reason", "a reason cannot hold a NUL character")
	}
	return nil
}

// kindWords names what a pending kind waits for.
func kindWords(k tools.PendingKind) string {
	switch k {
	case tools.PendingApproval:
		return "an approval decision"
	case tools.PendingElicitation:
		return "an answer to a question"
	case tools.PendingClientExec:
		return "a browser tool's result"
	}
	return string(k)
}

// Kind checks the resolution's shape and says which pending kind it answers: exactly one of a
// decision (with optional edited arguments or a reason), an answer (an action with optional
// content) or a browser's report (a result or an error). Whether the call awaits that kind,
// and whether the payload fits the call's schemas, Resolve decides.
func (r Resolution) Kind() (tools.PendingKind, error) {
	var kinds []tools.PendingKind
	if r.Decision != "" || present(r.Args) || r.ArgFields != nil || r.Reason != "" || r.Remember != nil {
		kinds = append(kinds, tools.PendingApproval)
	}
	if r.Action != "" || present(r.Content) || r.Answers != nil {
		kinds = append(kinds, tools.PendingElicitation)
	}
	if present(r.Result) || r.Error != nil {
		kinds = append(kinds, tools.PendingClientExec)
	}
	if len(kinds) != 1 {
		return "", fault.New(fault.KindInvalidArgs, "a resolution is exactly one of: "+resolutionHint, nil)
	}
	switch kinds[0] {
	case tools.PendingApproval:
		if err := CheckReason(r.Reason); err != nil {
			return "", err
		}
		switch r.Decision {
		case "approve":
			if present(r.Args) && r.ArgFields != nil {
				return "", fault.InvalidField("args", "send edited arguments as JSON or as fields, not both")
			}
		case "deny":
			if present(r.Args) || r.ArgFields != nil {
				return "", fault.InvalidField("args", "edited arguments go with approve, not deny")
			}
			if r.Remember != nil {
				return "", fault.InvalidField("remember", "remember goes with approve, not deny")
			}
		default:
			return "", fault.InvalidField("decision", `decision must be "approve" or "deny"`)
		}
	case tools.PendingElicitation:
		switch r.Action {
		case "accept":
			if present(r.Content) && r.Answers != nil {
				return "", fault.InvalidField("content", "send the answers as JSON or as fields, not both")
			}
		case "decline", "cancel":
			if present(r.Content) || r.Answers != nil {
				return "", fault.InvalidField("content", "content goes with accept only")
			}
		default:
			return "", fault.InvalidField("action", `action must be "accept", "decline" or "cancel"`)
		}
	case tools.PendingClientExec:
		if present(r.Result) && r.Error != nil {
			return "", fault.New(fault.KindInvalidArgs, "send a result or an error, not both", nil)
		}
	}
	return kinds[0], nil
}

// present reports whether a raw JSON field was given (JSON null counts as absent).
func present(raw []byte) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null"
}

// Storable reports whether text can be stored as it is: valid UTF-8 without NUL bytes (which
// PostgreSQL refuses in text).
func Storable(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }
