package agent

import (
	"encoding/json"
	"testing"

	"parley/internal/store"
	"parley/internal/tools"
)

// FuzzReplay feeds arbitrary log entries to the replay that rebuilds a conversation on
// revival: a damaged or unexpected log must give an error or a state, never a panic, and the
// state must render (view, status, compaction).
func FuzzReplay(f *testing.F) {
	types := []store.EntryType{store.EntryUserMessage, store.EntryAssistantMessage, store.EntryToolCall, store.EntryDecision,
		store.EntryToolResult, store.EntryToolError, store.EntryExpiry, store.EntryAttemptStarted, store.EntryAttemptFailed, store.EntryTurnError}
	f.Add([]byte{0, 1, 2}, `{"text":"hi"}`, `{"text":"","tool_calls":[{"id":"a","name":"ask_user"}]}`, `{"name":"ask_user","pending":"elicitation","args":{}}`, "a")
	f.Add([]byte{2, 3, 4, 9}, `{"name":"x"}`, `{"decision":"approve","args":{"n":1}}`, `{"envelope":{"ok":true},"status":"resolved"}`, "")
	f.Add([]byte{1, 8, 7, 5}, `{"tool_calls":[{"id":"p","provider":true,"result":{}}]}`, `{"attempt":2}`, `null`, "p")
	reg, err := tools.NewRegistry(tools.AskUser(), tools.Geolocation())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, order []byte, d1, d2, d3, callID string) {
		st := newState(store.Conversation{ID: "c", OwnerID: "o"})
		datas := []string{d1, d2, d3}
		for i, o := range order {
			if i > 40 {
				break
			}
			raw := json.RawMessage(datas[i%3])
			e := store.Entry{Seq: int64(i + 1), Type: types[int(o)%len(types)], ToolCallID: callID, Data: raw}
			if err := st.apply(e, reg); err != nil {
				return // a replay error stops revival with an error; that is the contract
			}
		}
		st.status = st.derivedStatus()
		_ = viewOf(st, "")
		_ = evictions(st)
		for _, c := range st.currentCalls() {
			_ = callFromRow(store.ToolCall{ToolCallID: c.id, PendingKind: string(c.kind), Prompt: recordOf(c)})
		}
	})
}
