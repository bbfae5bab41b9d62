package sqlitestore

import (
	"crypto/sha256"
	"database/sql/driver"
	"encoding/hex"
	"strconv"
	"strings"
	"unicode/utf8"

	"modernc.org/sqlite"

	"parley/internal/store"
	"parley/internal/store/internal/sqlcore"
)

// Search on the embedded store is scoped to its owner before it matches (migrations/sqlite/022).
// FTS5 keeps one list of terms for the whole table, and a prefix query ("budg"*) walks every
// term that starts with it: when the terms were the words themselves, one owner's search read
// every owner's budget, budgets, budgeting… and only then kept the owner's rows, so its cost grew
// with everyone's data (docs/benchmarks.md). Now every indexed term is the owner's key followed
// by the word (ownerKey + "budget"), and a search asks for its owner's key followed by its words
// ("<key>budg"*): FTS5's prefix lookup seeks to that owner's terms and walks only them.
//
// The key is a fixed-length hash of the owner's id, so no key is a prefix of another's term.
// Two owners whose keys collide share terms, which costs each the other's matches to skip and
// nothing else: the search still keeps its owner's conversations only (findSQL's owner_id).
//
// The terms are made in Go (parley_search_terms, registered with the driver: message_text's
// insert trigger calls it) from the words SearchWords sees, so a document and a query are cut
// into words by the same rule; the FTS5 table's tokenizer (unicode61 with marks as word
// characters) then finds one token per term. The index is contentless: what it would show
// (snippet()) would be the terms, so the excerpt is made in Go (excerpt) from a window of the
// message's text, as on PostgreSQL.

// ownerKeyBytes is how much of the owner id's SHA-256 the key holds: 48 bits, hex-encoded.
const ownerKeyBytes = 6

// ownerKey is the prefix of every indexed term of ownerID's messages.
func ownerKey(ownerID string) string {
	sum := sha256.Sum256([]byte(ownerID))
	return hex.EncodeToString(sum[:ownerKeyBytes])
}

// searchTerms is what the index holds for a message of ownerID's: each of body's words
// (SearchWords), prefixed by the owner's key, separated by spaces.
func searchTerms(ownerID, body string) string {
	key := ownerKey(ownerID)
	words := store.SearchWords(body)
	var b strings.Builder
	b.Grow(len(body) + len(words)*(len(key)+1))
	for i, w := range words {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(key)
		b.WriteString(w)
	}
	return b.String()
}

func init() {
	// A file's message_text trigger calls it: every connection the driver opens has it. A
	// missing owner (no conversation row) or body indexes as no terms.
	sqlite.MustRegisterDeterministicScalarFunction("parley_search_terms", 2, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		owner, _ := args[0].(string)
		body, _ := args[1].(string)
		return searchTerms(owner, body), nil
	})
}

// ftsMatch is the FTS5 query of findSQL for ownerID's search: every word behind the owner's
// key, each also as a prefix when it has at least sqlcore.MinPrefix characters
// ("<key>budg"* "<key>q3"). The words are letters and digits only; quoting them keeps FTS5 from
// reading a word such as NOT or AND as an operator.
func ftsMatch(ownerID string, words []string) string {
	key := ownerKey(ownerID)
	return sqlcore.MatchTerms(words, func(w string) string { return `"` + key + w + `"` }, "*", " ")
}

// findSQL finds an owner's conversations by title (LIKE, as SearchConversations) or by message
// (the FTS5 index of the owner's terms), naming each conversation's most recent matching
// message. For the page of hits returned alone it selects, in the excerpt's place, a window of
// the message for excerpt: store.SnippetWindow characters (one more, to tell whether the text
// goes on) from store.SnippetLead before the first place $5 (the longest search word) appears,
// else from the start, led by SnippetMark when the window starts after the text's start. The
// text holds no markers of its own (messageBodySQL).
var findSQL = `WITH hits AS (
	SELECT t.conversation_id, max(t.seq) AS seq
	FROM message_search s JOIN message_text t ON t.id = s.rowid JOIN conversations c ON c.id = t.conversation_id
	WHERE message_search MATCH $2 AND c.owner_id = $1
	GROUP BY t.conversation_id
),
found AS (
	SELECT c.id, c.owner_id, c.title, c.status, c.last_seq, c.created_at, c.updated_at, h.seq
	FROM conversations c LEFT JOIN hits h ON h.conversation_id = c.id
	WHERE c.owner_id = $1 AND (h.seq IS NOT NULL OR lower(c.title) LIKE lower($3) ESCAPE '\')
	ORDER BY c.updated_at DESC, c.created_at DESC, c.id LIMIT $4
)
SELECT f.id, f.owner_id, f.title, f.status, f.last_seq, f.created_at, f.updated_at, coalesce(f.seq, 0),
	CASE WHEN f.seq IS NULL THEN '' ELSE coalesce((SELECT CASE WHEN instr(lower(t.body), $5) > ` + snippetLead + ` + 1
			THEN char(2) || substr(t.body, instr(lower(t.body), $5) - ` + snippetLead + `, ` + snippetWindow + ` + 1)
			ELSE substr(t.body, 1, ` + snippetWindow + ` + 1) END
		FROM message_text t WHERE t.conversation_id = f.id AND t.seq = f.seq), '') END
FROM found f
ORDER BY f.updated_at DESC, f.created_at DESC, f.id`

var (
	snippetLead   = strconv.Itoa(store.SnippetLead)
	snippetWindow = strconv.Itoa(store.SnippetWindow)
)

const (
	// excerptBefore is how many words an excerpt shows before the first match, at most.
	excerptBefore = store.SnippetWords / 4
	// maxExcerptBytes is where an excerpt stops adding words after its first match.
	maxExcerptBytes = 400
	// maxPartBytes bounds one word, or the text between two words, shown in an excerpt: a
	// window of one long token (a URL, a base64 blob) is not an excerpt.
	maxPartBytes = 64
)

// excerpt makes a message hit's excerpt (sqlcore.Dialect.Excerpt) from the window findSQL
// selected: about store.SnippetWords words from a few before the first word that matches a
// search word (whole, or as a prefix when the search word has at least sqlcore.MinPrefix
// characters), every matching word between SnippetMark and SnippetEnd, "…" where the message
// goes on, as FTS5's snippet() showed it.
func excerpt(window string, words []string) string {
	text, cutBefore := strings.CutPrefix(window, store.SnippetMark)
	text = strings.NewReplacer(store.SnippetMark, "", store.SnippetEnd, "").Replace(text)
	cutAfter := false
	if n := utf8.RuneCountInString(text); n > store.SnippetWindow {
		text, cutAfter = text[:runeOffset(text, store.SnippetWindow)], true
	}
	toks := wordSpans(text)
	// A word at a cut edge may be part of one: it is not shown.
	if cutBefore && len(toks) > 0 && toks[0][0] == 0 {
		toks = toks[1:]
	}
	if cutAfter && len(toks) > 0 && toks[len(toks)-1][1] == len(text) {
		toks = toks[:len(toks)-1]
	}
	if len(toks) == 0 {
		return ""
	}
	matches := func(tok string) bool {
		tok = strings.ToLower(tok)
		for _, w := range words {
			if tok == w || (utf8.RuneCountInString(w) >= sqlcore.MinPrefix && strings.HasPrefix(tok, w)) {
				return true
			}
		}
		return false
	}
	first := 0
	for i, t := range toks {
		if matches(text[t[0]:t[1]]) {
			first = i
			break
		}
	}
	from := max(0, first-excerptBefore)
	to := min(len(toks), from+store.SnippetWords)

	var b strings.Builder
	pos := toks[from][0]
	if from == 0 && !cutBefore {
		pos = 0 // the text before the first word: opening punctuation, a quote
	} else {
		b.WriteString("… ")
	}
	end := to
	for i := from; i < to; i++ {
		t := toks[i]
		b.WriteString(clip(text[pos:t[0]]))
		if w := text[t[0]:t[1]]; matches(w) {
			b.WriteString(store.SnippetMark + clip(w) + store.SnippetEnd)
		} else {
			b.WriteString(clip(w))
		}
		pos = t[1]
		if i >= first && b.Len() >= maxExcerptBytes {
			end = i + 1
			break
		}
	}
	if end == len(toks) && !cutAfter {
		b.WriteString(clip(text[pos:])) // the text after the last word
	} else {
		b.WriteString(" …")
	}
	return b.String()
}

// wordSpans returns the byte spans of text's words: runs of store.IsWordRune.
func wordSpans(text string) [][2]int {
	var spans [][2]int
	start := -1
	for i, r := range text {
		switch {
		case store.IsWordRune(r) && start < 0:
			start = i
		case !store.IsWordRune(r) && start >= 0:
			spans = append(spans, [2]int{start, i})
			start = -1
		}
	}
	if start >= 0 {
		spans = append(spans, [2]int{start, len(text)})
	}
	return spans
}

// clip bounds s to maxPartBytes, cut at a rune's start and ended with "…" when it is cut.
func clip(s string) string {
	if len(s) <= maxPartBytes {
		return s
	}
	i := maxPartBytes
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

// runeOffset is the byte offset of s's n-th rune (len(s) when s has fewer).
func runeOffset(s string, n int) int {
	for i := range s {
		if n == 0 {
			return i
		}
		n--
	}
	return len(s)
}
