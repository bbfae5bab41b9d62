// Package demo is Parley's built-in offline model: deterministic, no network, and able to
// drive every kind of tool from ordinary words, so the app can be tried without a provider.
//
// It reads the last user message and picks one intent (first match wins, in this order):
//
//	"mixed", "do everything"            → get_current_time + echo (server) and ask_user (human) in one answer
//	"ask me …"                          → ask_user (human) with a small form
//	"deploy the website"                → deploy (gated; a reviewer, not the owner, decides)
//	"email bob@example.com about lunch" → send_email (gated) with to/subject/body from the words
//	"where am I", "my location"         → geolocation (client)
//	"survey", "form"                    → ask_user (human) with a small form
//	"search …"                          → a plain answer: web search runs at a provider
//	"what time is it", "the time"       → get_current_time (server), with a zone for a few cities
//	"count to 5", "count down from 5"   → count_down (streaming server tool)
//	"retry", "fail"                     → failing (retryable for "retry")
//	"echo …", "repeat …"                → echo
//	anything else                       → a plain answer saying what it can do
//
// When the last messages are tool results, it answers with a short Markdown summary of them,
// reading each envelope's ok / error.kind. Text is streamed in word-sized deltas, with an
// optional pause between them. Tool-call ids are "demo_<m>_<k>": m is the number of messages
// in the request, which only grows within a conversation, so ids never repeat.
package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"parley/internal/clock"
	"parley/internal/llm"
)

// Format is the demo model's tool format: it reads tool names from definitions in any of the
// exported shapes (OpenAI {"function":{"name"}}, Anthropic {"name"}).
const Format = "demo"

// DefaultPace is the pause between text deltas when Config.Pace is zero: a few milliseconds,
// so the page shows the answer arriving word by word.
const DefaultPace = 8 * time.Millisecond

// NoPace streams without pausing (tests).
const NoPace time.Duration = -1

// Config configures the demo model.
type Config struct {
	// Pace is the pause between text deltas: 0 is DefaultPace, NoPace (any negative value)
	// streams without pausing.
	Pace time.Duration
	// Clock times the pauses; nil is the wall clock.
	Clock clock.Clock
}

// Provider is the demo model. It is safe for concurrent use.
type Provider struct {
	pace  time.Duration
	clock clock.Clock
}

var _ llm.Provider = (*Provider)(nil)

// New returns the demo model.
func New(cfg Config) *Provider {
	clk := cfg.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	pace := cfg.Pace
	if pace == 0 {
		pace = DefaultPace
	}
	return &Provider{pace: pace, clock: clk}
}

// Name returns "demo".
func (p *Provider) Name() string { return "demo" }

// ToolFormat returns "demo".
func (p *Provider) ToolFormat() string { return Format }

// Stream answers req deterministically: the same request always gives the same answer.
func (p *Provider) Stream(ctx context.Context, req llm.Request, emit func(llm.Event) error) (llm.Response, error) {
	if err := ctx.Err(); err != nil {
		return llm.Response{}, err
	}
	ans := Answer(req)
	for i, d := range words(ans.Text) {
		if i > 0 && p.pace > 0 {
			t := p.clock.NewTimer(p.pace)
			select {
			case <-ctx.Done():
				t.Stop()
				return llm.Response{}, ctx.Err()
			case <-t.C():
			}
		}
		if err := emit(llm.Event{Type: llm.EventTextDelta, Text: d}); err != nil {
			return llm.Response{}, err
		}
	}
	for i := range ans.ToolCalls {
		if err := emit(llm.Event{Type: llm.EventToolCall, ToolCall: &ans.ToolCalls[i]}); err != nil {
			return llm.Response{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return llm.Response{}, err
	}
	return ans, nil
}

// Answer computes the whole answer to req without streaming it.
func Answer(req llm.Request) llm.Response {
	defs := definitions(req.Tools)
	tools := map[string]bool{}
	for _, d := range defs {
		tools[d.name] = true
	}
	b := &builder{tools: tools, defs: defs, prefix: fmt.Sprintf("demo_%d_", len(req.Messages)), used: usedIDs(req.Messages)}
	if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == llm.RoleTool {
		b.text = summarize(req.Messages)
	} else {
		respond(b, lastUserText(req.Messages))
	}
	resp := llm.Response{Text: b.text, ToolCalls: b.calls, StopReason: "end_turn"}
	if len(b.calls) > 0 {
		resp.StopReason = "tool_use"
	}
	in := countWords(req.System)
	for _, m := range req.Messages {
		in += countWords(m.Content)
	}
	out := countWords(b.text)
	for _, c := range b.calls {
		out += countWords(string(c.Args))
	}
	resp.Usage = llm.Usage{InputTokens: in, OutputTokens: out}
	return resp
}

// builder gathers an answer.
type builder struct {
	tools  map[string]bool
	defs   []definition
	prefix string
	used   map[string]bool
	text   string
	calls  []llm.ToolCall
}

func (b *builder) has(name string) bool { return b.tools[name] }

// call adds a tool call with a deterministic id unique in the conversation.
func (b *builder) call(name string, args map[string]any) {
	raw, _ := json.Marshal(args)
	id := b.prefix + strconv.Itoa(len(b.calls))
	for n := 2; b.used[id]; n++ {
		id = fmt.Sprintf("%s%d_%d", b.prefix, len(b.calls), n)
	}
	b.used[id] = true
	b.calls = append(b.calls, llm.ToolCall{ID: id, Name: name, Args: raw})
}

// missing answers when the tool an intent needs is not offered in this conversation.
func (b *builder) missing(name string) {
	b.text = fmt.Sprintf("I would use the `%s` tool for that, but it is not available in this conversation.", name)
}

var (
	emailRE      = regexp.MustCompile(`[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+`)
	emailWordRE  = regexp.MustCompile(`\b(e-?mail|mail)\b`)
	locationRE   = regexp.MustCompile(`\bwhere am i\b|\bmy (?:\w+ )?(?:location|position|whereabouts)\b|\blocate me\b|\bwhere i am\b`)
	askMeRE      = regexp.MustCompile(`\bask me\b`)
	surveyRE     = regexp.MustCompile(`\bsurvey\b|\bquestionnaire\b|\bform\b`)
	searchRE     = regexp.MustCompile(`\b(search|look up|google)\b`)
	searchVerbRE = regexp.MustCompile(`^\s*(search|look up|google)\b`)
	timeRE       = regexp.MustCompile(`\bwhat time\b|\bthe time\b|\btime is it\b|\bcurrent time\b|\bwhat day\b|\btoday'?s date\b`)
	countRE      = regexp.MustCompile(`\bcount(?:\s+down)?\s+(?:to|from)\s+(\d+)\b|\bcount\s*down\b`)
	failRE       = regexp.MustCompile(`\b(fail|failing|failure|retry|retries)\b`)
	echoRE       = regexp.MustCompile(`(?i)^\s*(?:echo|repeat)\b[:,]?\s*(.*)$`)
	mixedRE      = regexp.MustCompile(`\bmixed\b|\bdo everything\b|\beverything at once\b`)
	greetingRE   = regexp.MustCompile(`^\s*(hi|hello|hey|good (morning|afternoon|evening))\b`)
	deployRE     = regexp.MustCompile(`\bdeploy\b(?:\s+(?:the\s+)?([a-z0-9][a-z0-9-]{0,39}))?`)
	codeRE       = regexp.MustCompile(`\b(show|write|give)\b.*\bcode\b|\bcode (example|sample)\b`)
)

// codeAnswer shows a fenced code block (highlighted on the page, with a copy button) and a
// little Markdown around it.
const codeAnswer = "Here is a small **Go** program:\n\n```go\npackage main\n\nimport \"fmt\"\n\n" +
	"func main() {\n\tfor i := 3; i > 0; i-- {\n\t\tfmt.Println(\"countdown:\", i)\n\t}\n}\n```\n\n" +
	"Run it with `go run main.go`."

// zones maps a few city names to IANA zones for "what time is it in …".
var zones = map[string]string{
	"paris": "Europe/Paris", "london": "Europe/London", "berlin": "Europe/Berlin", "tokyo": "Asia/Tokyo",
	"new york": "America/New_York", "san francisco": "America/Los_Angeles", "los angeles": "America/Los_Angeles",
	"sydney": "Australia/Sydney", "utc": "UTC",
}

// respond picks the intent of the user's text.
func respond(b *builder, text string) {
	lower := strings.ToLower(text)
	switch {
	case prefixed(b, b.defs, text): // prefixed.go: an MCP server's tools
	case codeRE.MatchString(lower):
		b.text = codeAnswer
	case mixedRE.MatchString(lower):
		mixed(b)
	case askMeRE.MatchString(lower):
		survey(b)
	case deployRE.MatchString(lower):
		deploy(b, lower)
	case (emailRE.MatchString(text) || emailWordRE.MatchString(lower)) && !searchVerbRE.MatchString(lower):
		email(b, text)
	case locationRE.MatchString(lower):
		if !b.has("geolocation") {
			b.missing("geolocation")
			return
		}
		args := map[string]any{}
		if strings.Contains(lower, "precise") || strings.Contains(lower, "exact") {
			args["high_accuracy"] = true
		}
		b.text = "Let me ask your browser where you are."
		b.call("geolocation", args)
	case surveyRE.MatchString(lower):
		survey(b)
	case searchRE.MatchString(lower):
		b.text = "I can't search the web: web search is run by the model provider (Anthropic's hosted " +
			"web search), and I am the offline demo model. Start Parley with `PARLEY_MODEL=anthropic:<model>` " +
			"and an `ANTHROPIC_API_KEY` to search."
	case timeRE.MatchString(lower):
		if !b.has("get_current_time") {
			b.missing("get_current_time")
			return
		}
		args := map[string]any{"format": "human"}
		if z := zoneIn(lower); z != "" {
			args["timezone"] = z
		}
		b.text = "Let me check the clock."
		b.call("get_current_time", args)
	case countRE.MatchString(lower):
		if !b.has("count_down") {
			b.missing("count_down")
			return
		}
		from := 3
		if m := countRE.FindStringSubmatch(lower); m[1] != "" {
			from, _ = strconv.Atoi(m[1])
		}
		from = min(max(from, 1), 10)
		b.text = fmt.Sprintf("Counting down from %d.", from)
		b.call("count_down", map[string]any{"from": from})
	case failRE.MatchString(lower):
		if !b.has("failing") {
			b.missing("failing")
			return
		}
		retry := strings.Contains(lower, "retr")
		b.text = "Calling a tool that always fails, to show how errors are handled."
		msg := "the demo asked this tool to fail"
		if retry {
			b.text = "Calling a tool that fails with a retryable error, to show the retry scheduler."
			msg = "a transient failure (the demo asked for a retry)"
		}
		b.call("failing", map[string]any{"message": msg, "retryable": retry})
	case echoRE.MatchString(text) && b.has("echo"):
		b.text = "Echoing that back through a tool."
		b.call("echo", map[string]any{"text": strings.TrimSpace(echoRE.FindStringSubmatch(text)[1])})
	default:
		b.text = plain(text, b.tools, b.defs)
	}
}

// mixed makes two server calls and one human call in one answer.
func mixed(b *builder) {
	var server []string
	for _, n := range []string{"get_current_time", "echo", "count_down"} {
		if b.has(n) && len(server) < 2 {
			server = append(server, n)
		}
	}
	if len(server) == 0 && !b.has("ask_user") {
		b.text = "I would run several tools at once, but none of the ones I use is available here."
		return
	}
	b.text = "Doing several things at once: two quick server tools and one question for you."
	for _, n := range server {
		switch n {
		case "get_current_time":
			b.call(n, map[string]any{"format": "iso8601"})
		case "echo":
			b.call(n, map[string]any{"text": "hello from the demo model"})
		case "count_down":
			b.call(n, map[string]any{"from": 2})
		}
	}
	if b.has("ask_user") {
		b.call("ask_user", map[string]any{
			"message": "While those run: what should I call you?",
			"schema": map[string]any{
				"type":       "object",
				"properties": map[string]any{"name": map[string]any{"type": "string", "title": "Your name", "minLength": 1}},
				"required":   []string{"name"},
			},
		})
	}
}

// survey asks the user a few questions with ask_user.
func survey(b *builder) {
	if !b.has("ask_user") {
		b.missing("ask_user")
		return
	}
	b.text = "I have a few questions for you."
	b.call("ask_user", surveyArgs())
}

// surveyForm is ask_user's form: one property of each kind the form renderer supports, in the
// order a person would fill them in (kept as raw JSON so the order survives encoding).
const surveyForm = `{"type":"object","title":"About you","properties":{` +
	`"name":{"type":"string","title":"Name","minLength":1},` +
	`"favourite_colour":{"type":"string","title":"Favourite colour","enum":["red","green","blue"]},` +
	`"subscribe":{"type":"boolean","title":"Subscribe to the newsletter","default":false},` +
	`"birthday":{"type":"string","title":"Birthday","format":"date"}},` +
	`"required":["name","favourite_colour"]}`

func surveyArgs() map[string]any {
	return map[string]any{"message": "Tell me a little about yourself.", "schema": json.RawMessage(surveyForm)}
}

var (
	aboutRE    = regexp.MustCompile(`(?i)\b(?:about|regarding|re:?|subject:?)\s+(.+?)\s*[.!?]*\s*$`)
	bareNameRE = regexp.MustCompile(`(?i)\b(?:e-?mail|mail)\s+([a-z][a-z'-]*)\b`)
)

// email drafts a send_email call from the words: the address (or name@example.com for a bare
// name), a subject from what follows "about", and a short body.
func email(b *builder, text string) {
	if !b.has("send_email") {
		b.missing("send_email")
		return
	}
	to := emailRE.FindString(text)
	if to == "" {
		name := "someone"
		if m := bareNameRE.FindStringSubmatch(text); m != nil && !stopWords[strings.ToLower(m[1])] {
			name = strings.ToLower(m[1])
		}
		to = name + "@example.com"
	}
	topic := "hello"
	if m := aboutRE.FindStringSubmatch(text); m != nil {
		topic = strings.TrimSpace(emailRE.ReplaceAllString(m[1], ""))
	}
	if topic == "" {
		topic = "hello"
	}
	if len(topic) > 120 {
		topic = topic[:120]
	}
	local := to[:strings.IndexByte(to, '@')]
	greeting := strings.ToUpper(local[:1]) + local[1:]
	if i := strings.IndexAny(greeting, "._+"); i > 0 {
		greeting = greeting[:i]
	}
	subject := strings.ToUpper(topic[:1]) + topic[1:]
	body := fmt.Sprintf("Hi %s,\n\nI wanted to get in touch about %s. Let me know what you think.\n\nBest regards", greeting, topic)
	b.text = fmt.Sprintf("I've drafted an email to %s about %s. It needs your approval before it is sent.", to, topic)
	b.call("send_email", map[string]any{"to": to, "subject": subject, "body": body})
}

// deploy asks to deploy a service (the word after "deploy", else "website") to staging, or to
// production when the words say so. The call waits for a reviewer: the text says who.
func deploy(b *builder, lower string) {
	if !b.has("deploy") {
		b.missing("deploy")
		return
	}
	service := "website"
	if m := deployRE.FindStringSubmatch(lower); m[1] != "" && !stopWords[m[1]] && !notAService[m[1]] {
		service = m[1]
	}
	env := "staging"
	if strings.Contains(lower, "prod") {
		env = "production"
	}
	b.text = fmt.Sprintf("I've asked to deploy %s to %s. A reviewer decides deployments, not you: "+
		"it waits in the reviewers' **Inbox** until one of them approves or denies it.", service, env)
	b.call("deploy", map[string]any{"service": service, "environment": env})
}

// notAService are words after "deploy" that name no service ("deploy it to production").
var notAService = map[string]bool{"it": true, "this": true, "that": true, "now": true, "my": true, "our": true, "something": true}

var stopWords = map[string]bool{"me": true, "a": true, "an": true, "the": true, "to": true, "about": true}

func zoneIn(lower string) string {
	keys := make([]string, 0, len(zones))
	for k := range zones {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if strings.Contains(lower, "in "+k) {
			return zones[k]
		}
	}
	return ""
}

// plain answers a message no tool intent matched.
func plain(text string, tools map[string]bool, defs []definition) string {
	var sb strings.Builder
	if greetingRE.MatchString(strings.ToLower(text)) {
		sb.WriteString("Hello! ")
	}
	sb.WriteString("I'm Parley's **demo model**: I run offline and answer from fixed rules, so I can show every kind of tool without a real model.")
	if strings.TrimSpace(text) == "" {
		sb.WriteString(" You sent an empty message.")
	}
	sb.WriteString(" Try one of these:\n\n")
	lines := []struct{ tool, line string }{
		{"send_email", "- *email bob@example.com about lunch*: an email that waits for your approval"},
		{"deploy", "- *deploy the website*: a deployment that waits for a reviewer (the Inbox)"},
		{"geolocation", "- *where am I?*: your browser reports your location"},
		{"ask_user", "- *ask me a few questions*: a form for you to fill in"},
		{"get_current_time", "- *what time is it in Tokyo?*: a server tool"},
		{"count_down", "- *count to 5*: a tool that streams its progress"},
		{"failing", "- *fail* or *retry*: a tool error, and the retry scheduler"},
		{"", "- *do everything*: several tools in one answer"},
	}
	for _, l := range lines {
		if l.tool == "" || tools[l.tool] {
			sb.WriteString(l.line + "\n")
		}
	}
	for _, l := range prefixedHints(defs) {
		sb.WriteString(l + "\n")
	}
	return strings.TrimRight(sb.String(), "\n")
}

// summarize answers the tool results that end the conversation: one bullet per result, in the
// order of the calls.
func summarize(msgs []llm.Message) string {
	start := len(msgs)
	for start > 0 && msgs[start-1].Role == llm.RoleTool {
		start--
	}
	names := map[string]string{}
	for i := start - 1; i >= 0; i-- {
		if msgs[i].Role == llm.RoleAssistant {
			for _, tc := range msgs[i].ToolCalls {
				names[tc.ID] = tc.Name
			}
			break
		}
	}
	var sb strings.Builder
	sb.WriteString("Here is what happened:\n\n")
	okAll := true
	for _, m := range msgs[start:] {
		name := names[m.ToolCallID]
		if name == "" {
			name = "a tool"
		}
		line, ok := describe(name, m.Content)
		okAll = okAll && ok
		fmt.Fprintf(&sb, "- **%s**: %s\n", name, line)
	}
	if okAll {
		sb.WriteString("\nEverything went through. Anything else?")
	} else {
		sb.WriteString("\nNot everything went as planned; tell me if you want to try again.")
	}
	return sb.String()
}

// envelope is the result JSON the model reads.
type envelope struct {
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result"`
	Error  struct {
		Kind    string         `json:"kind"`
		Message string         `json:"message"`
		Details map[string]any `json:"details"`
	} `json:"error"`
}

// describe renders one result for the summary and reports whether it succeeded.
func describe(name, content string) (string, bool) {
	var env envelope
	if err := json.Unmarshal([]byte(content), &env); err != nil {
		return "returned `" + clip(content, 160) + "`", true
	}
	if !env.OK {
		return describeError(name, env), false
	}
	var r map[string]any
	_ = json.Unmarshal(env.Result, &r)
	str := func(k string) string {
		if v, ok := r[k]; ok && v != nil {
			return fmt.Sprint(v)
		}
		return ""
	}
	num := func(k string) string {
		if v, ok := r[k].(float64); ok {
			return strconv.FormatFloat(v, 'f', -1, 64)
		}
		return str(k)
	}
	switch {
	case name == "get_current_time" && str("time") != "":
		return fmt.Sprintf("it is %s (%s).", num("time"), str("timezone")), true
	case name == "geolocation" && str("latitude") != "":
		return fmt.Sprintf("you are at %s, %s (within about %s m).", num("latitude"), num("longitude"), num("accuracy")), true
	case name == "send_email" && str("to") != "":
		return fmt.Sprintf("the email to %s (%q) is %s.", str("to"), str("subject"), orDefault(str("status"), "sent")), true
	case name == "deploy" && str("service") != "":
		return fmt.Sprintf("%s is %s to %s.", str("service"), orDefault(str("status"), "deployed"), str("environment")), true
	case name == "count_down" && str("counted_from") != "":
		return fmt.Sprintf("counted down from %s.", num("counted_from")), true
	case name == "echo" && r != nil:
		return fmt.Sprintf("echoed %q.", str("text")), true
	}
	if c, ok := r["content"].(map[string]any); ok { // an elicitation answer
		return "you answered " + fields(c) + ".", true
	}
	if r != nil && name == "ask_user" {
		return "you answered " + fields(r) + ".", true
	}
	var said string
	if json.Unmarshal(env.Result, &said) == nil { // a text result (an MCP server's, typically)
		return "said: " + clip(said, 300), true
	}
	return "returned `" + clip(string(env.Result), 160) + "`", true
}

func describeError(name string, env envelope) string {
	msg := env.Error.Message
	switch env.Error.Kind {
	case "denied":
		if msg != "" {
			return "you denied it: " + msg
		}
		return "you denied it."
	case "declined":
		return "you declined to answer."
	case "timeout":
		return "no answer came in time, so it timed out."
	case "no_client":
		return "no browser was connected to run it."
	case "invalid_args":
		return "its arguments were invalid: " + orDefault(msg, "no details")
	case "":
		return "it failed."
	}
	return fmt.Sprintf("it failed (`%s`): %s", env.Error.Kind, orDefault(msg, "no details"))
}

func fields(m map[string]any) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s = %v", k, m[k]))
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// definitions reads the tool definitions in OpenAI ({"function":{"name"}}) or Anthropic /
// native ({"name"}) shape; one without a name is left out.
func definitions(raw []llm.Tool) []definition {
	out := make([]definition, 0, len(raw))
	for _, d := range raw {
		if def := definitionOf(d); def.name != "" {
			out = append(out, def)
		}
	}
	return out
}

// defined keeps each tool definition as read: the same definitions come with every request,
// and parsing them all each time was most of the demo model's work. Bounded by maxDefined; when
// full it is emptied and refills from the requests that follow.
var defined = struct {
	sync.Mutex
	m map[string]definition
}{m: map[string]definition{}}

const maxDefined = 1024

func definitionOf(d llm.Tool) definition {
	defined.Lock()
	def, ok := defined.m[string(d)]
	defined.Unlock()
	if ok {
		return def
	}
	def = parseDefinition(d)
	defined.Lock()
	if len(defined.m) >= maxDefined {
		clear(defined.m)
	}
	defined.m[string(d)] = def
	defined.Unlock()
	return def
}

func lastUserText(msgs []llm.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == llm.RoleUser {
			return msgs[i].Content
		}
	}
	return ""
}

func usedIDs(msgs []llm.Message) map[string]bool {
	used := map[string]bool{}
	for _, m := range msgs {
		for _, tc := range m.ToolCalls {
			used[tc.ID] = true
		}
	}
	return used
}

// words splits text into word-sized deltas that concatenate back to it exactly: each delta is
// a word with the whitespace that follows it (leading whitespace rides on the first).
func words(text string) []string {
	var out []string
	start := 0
	inSpace := false
	for i, r := range text {
		space := unicode.IsSpace(r)
		if !space && inSpace && i > start && strings.TrimSpace(text[start:i]) != "" {
			out = append(out, text[start:i])
			start = i
		}
		inSpace = space
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return out
}

func countWords(s string) int { return len(strings.Fields(s)) }
