package cluster_test

import (
	"context"
	"testing"

	"parley/internal/agent"
	"parley/internal/fault"
	"parley/internal/llm/llmtest"
	"parley/internal/store"
)

// The owner decides with the user's role as the store has it, not as the forwarded body says:
// a body that claims a higher role (stale, or sealed by whoever holds the key), a user that
// does not exist, or the system's own principal on a person's request, decides nothing (found
// by an attack: a forwarded approval claiming "admin" for a member was taken as an override).
func TestForwardedRoleIsReadFromTheStore(t *testing.T) {
	w := newWorld(t)
	a, b := w.start(procOptions{}), w.start(procOptions{})
	bob, err := a.st.CreateUser(context.Background(), store.User{Name: "bob", Role: store.RoleMember, PasswordHash: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	conv := a.conversation(w.ann)
	w.model.Push(llmtest.Calls(llmtest.Call("n1", "note", map[string]any{"text": "x"})), llmtest.Reply("Noted."))
	if err := a.m.Send(context.Background(), conv, w.ann, "note"); err != nil { // a owns the conversation
		t.Fatal(err)
	}
	a.await(conv, w.ann, "awaiting", awaiting("n1"))
	if owner := ownerOf(t, a, conv); owner != a.node.Self() {
		t.Fatalf("the conversation is owned by %s, not a", owner)
	}
	approve := agent.Resolution{Decision: "approve"}
	for _, claimed := range []agent.Principal{
		{UserID: bob.ID, Role: store.RoleAdmin, Via: "token"},           // a member claiming admin
		{UserID: "no-such-user", Role: store.RoleAdmin, Via: "session"}, // nobody
		agent.System, // the app itself, on a person's request
	} {
		_, err := b.m.Resolve(context.Background(), conv, "n1", approve, claimed)
		if k := fault.KindOf(err); k != fault.KindPermissionDenied && k != fault.KindNotFound {
			t.Errorf("an approval forwarded for %+v: %v, want permission_denied", claimed, err)
		}
		if v := a.view(conv, w.ann); v.Status != store.StatusAwaiting {
			t.Fatalf("after an approval forwarded for %+v: %s, want awaiting", claimed, v.Status)
		}
	}
	// The owner herself, through b: taken.
	if _, err := b.m.Resolve(context.Background(), conv, "n1", approve, w.ann); err != nil {
		t.Fatalf("ann's own approval through b: %v", err)
	}
	a.await(conv, w.ann, "answered", saying("Noted."))
}
