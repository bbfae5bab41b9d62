package tools

import (
	"bytes"
	"encoding/json"
	"parley/internal/fault"
)

// envelope is the JSON shape the model reads: {"ok":true,"result":…} or {"ok":false,"error":…}.
type envelope struct {
	OK     bool           `json:"ok"`
	Result any            `json:"result,omitempty"`
	Error  map[string]any `json:"error,omitempty"`
}

// OKEnvelope renders a success envelope. A result that cannot be encoded becomes an internal
// error envelope carrying no message.
func OKEnvelope(result any) json.RawMessage {
	if result == nil {
		result = map[string]any{}
	}
	b, err := marshalText(envelope{OK: true, Result: result})
	if err != nil {
		return ErrorEnvelope(fault.New(fault.KindInternal, "the tool's result could not be encoded", nil))
	}
	return b
}

// ErrorEnvelope renders an error envelope.
func ErrorEnvelope(e *fault.Error) json.RawMessage {
	if e == nil {
		e = fault.New(fault.KindInternal, "internal error", nil)
	}
	b, err := marshalText(envelope{OK: false, Error: e.Map()})
	if err != nil {
		b, _ = marshalText(envelope{OK: false, Error: fault.New(e.Kind, e.Message, nil).Map()})
	}
	return b
}

// marshalText encodes v without HTML escaping: the envelope is text for the model, where
// "\u003c" for "<" only costs bytes of the output bound. The page escapes it when it renders.
func marshalText(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
