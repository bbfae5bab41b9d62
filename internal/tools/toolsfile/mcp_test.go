package toolsfile

import (
	"errors"
	"strings"
	"testing"
	"time"

	"parley/internal/tools"
	"parley/internal/tools/mcpadapter"
)

const mcpFile = `{"tools": [], "mcp_servers": [
  {"name": "files", "transport": "stdio", "command": ["mcp-files", "--root", "/srv"],
   "env": {"FILES_TOKEN": "PARLEY_FILES_TOKEN"}, "timeout_secs": 20, "max_retries": 1,
   "tools": {"allow": ["read", "write"], "approval": {"read": "auto"}, "default_approval": "requires_approval"}},
  {"name": "tickets", "transport": "http", "url": "https://mcp.example.test/mcp",
   "headers_env": {"Authorization": "TICKETS_AUTH"}, "trust_annotations": true,
   "max_message_bytes": 1048576, "max_list_bytes": 2097152}
]}`

func TestParseMCP(t *testing.T) {
	getenv := func(k string) string {
		return map[string]string{"PARLEY_FILES_TOKEN": "s3cret", "TICKETS_AUTH": "Bearer t"}[k]
	}
	cfgs, err := ParseMCP([]byte(mcpFile), Env{Getenv: getenv})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfgs) != 2 {
		t.Fatalf("%d servers", len(cfgs))
	}
	f, h := cfgs[0], cfgs[1]
	if f.Transport != mcpadapter.Stdio || f.Command[2] != "/srv" || f.Env["FILES_TOKEN"] != "s3cret" || f.Timeout != 20*time.Second ||
		f.MaxAttempts != 2 || f.Approval["read"] != tools.Auto || f.DefaultApproval != tools.RequiresApproval || len(f.Allow) != 2 {
		t.Errorf("stdio server %+v", f)
	}
	if f.TrustAnnotations {
		t.Errorf("annotations trusted without trust_annotations: %+v", f)
	}
	if h.Transport != mcpadapter.HTTP || h.Headers["Authorization"] != "Bearer t" || !h.TrustAnnotations ||
		h.MaxMessageBytes != 1<<20 || h.MaxListBytes != 2<<20 || f.MaxMessageBytes != 0 {
		t.Errorf("http server %+v", h)
	}
	// The tools part of the same file still loads.
	if _, err := Parse([]byte(mcpFile), Env{Getenv: getenv}); err != nil {
		t.Errorf("Parse: %v", err)
	}
}

func TestParseMCPProblems(t *testing.T) {
	cases := []struct{ name, file, path, msg string }{
		{"missing variable", `{"tools":[],"mcp_servers":[{"name":"a","transport":"http","url":"https://x.example.test/","headers_env":{"Authorization":"NOPE"}}]}`,
			"/mcp_servers/0/headers_env/Authorization", "NOPE is not set"},
		{"literal headers", `{"tools":[],"mcp_servers":[{"name":"a","transport":"http","url":"https://x.example.test/","headers":{"Authorization":"Bearer s3cret"}}]}`,
			"/mcp_servers/0", "headers"},
		{"private url", `{"tools":[],"mcp_servers":[{"name":"a","transport":"http","url":"http://127.0.0.1:9/mcp"}]}`,
			"/mcp_servers/0/url", "allow_private_network"},
		{"stdio with a url", `{"tools":[],"mcp_servers":[{"name":"a","transport":"stdio","command":["x"],"url":"https://x.example.test/"}]}`,
			"/mcp_servers/0", ""},
		{"no command", `{"tools":[],"mcp_servers":[{"name":"a","transport":"stdio"}]}`, "/mcp_servers/0", "command"},
		{"bad name", `{"tools":[],"mcp_servers":[{"name":"a__b","transport":"stdio","command":["x"]}]}`, "/mcp_servers/0/name", ""},
		{"duplicate", `{"tools":[],"mcp_servers":[{"name":"a","transport":"stdio","command":["x"]},{"name":"a","transport":"stdio","command":["y"]}]}`,
			"/mcp_servers/1/name", "already used"},
		{"bad approval", `{"tools":[],"mcp_servers":[{"name":"a","transport":"stdio","command":["x"],"tools":{"approval":{"t":"sometimes"}}}]}`,
			"/mcp_servers/0/tools/approval/t", ""},
		{"trust as text", `{"tools":[],"mcp_servers":[{"name":"a","transport":"stdio","command":["x"],"trust_annotations":"yes"}]}`,
			"/mcp_servers/0/trust_annotations", ""},
		{"tiny message bound", `{"tools":[],"mcp_servers":[{"name":"a","transport":"stdio","command":["x"],"max_message_bytes":10}]}`,
			"/mcp_servers/0/max_message_bytes", ""},
		{"huge list bound", `{"tools":[],"mcp_servers":[{"name":"a","transport":"stdio","command":["x"],"max_list_bytes":1e12}]}`,
			"/mcp_servers/0/max_list_bytes", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseMCP([]byte(tc.file), Env{Getenv: func(string) string { return "" }})
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("err %v", err)
			}
			for _, p := range fe.Problems {
				if strings.HasPrefix(p.Path, tc.path) && strings.Contains(p.Message, tc.msg) {
					return
				}
			}
			t.Fatalf("no problem at %s containing %q in %v", tc.path, tc.msg, fe)
		})
	}
}
