// Package static holds the page's JavaScript and CSS, embedded in the binary and served under
// content-hashed URLs (/static/<hash>/js/hooks.js) so browsers may cache them for a year: a
// changed file gets a new URL, an unchanged one is never fetched twice.
package static

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// files are the page's assets: hooks.js, the stylesheets and the icon.
//
//go:embed js css img
var files embed.FS

// Prefix is the URL path under which Handler serves the files.
const Prefix = "/static/"

// hashLen is how many hex digits of a file's SHA-256 go into its URL: enough that two versions
// of one file never collide in practice, short enough to read.
const hashLen = 12

// entry is one servable file.
type entry struct {
	hash string
	data []byte
}

// index maps a path such as "js/hooks.js" to its content and hash. Built once at init from the
// embedded, read-only files, so it needs no lock.
var index = buildIndex()

func buildIndex() map[string]entry {
	idx := map[string]entry{}
	_ = fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !servable(p) {
			return nil
		}
		b, err := files.ReadFile(p)
		if err != nil {
			return nil
		}
		sum := sha256.Sum256(b)
		idx[p] = entry{hash: hex.EncodeToString(sum[:])[:hashLen], data: b}
		return nil
	})
	return idx
}

// servable reports whether p is a public asset: a file under js/, css/ or img/.
func servable(p string) bool {
	return strings.HasPrefix(p, "js/") || strings.HasPrefix(p, "css/") || strings.HasPrefix(p, "img/")
}

// URL returns the content-hashed URL of an asset, e.g. URL("js/hooks.js") =
// "/static/3f2a9c0d1e4b/js/hooks.js". An unknown asset gets the hash "missing", so the page
// still renders and the request answers 404.
func URL(name string) string {
	name = strings.TrimPrefix(name, "/")
	e, ok := index[name]
	if !ok {
		return Prefix + "missing/" + name
	}
	return Prefix + e.hash + "/" + name
}

// Stylesheets returns the URLs of every CSS file, sorted by path, for the layout to link.
func Stylesheets() []string {
	var names []string
	for p := range index {
		if strings.HasPrefix(p, "css/") && path.Ext(p) == ".css" {
			names = append(names, p)
		}
	}
	sort.Strings(names)
	urls := make([]string, len(names))
	for i, n := range names {
		urls[i] = URL(n)
	}
	return urls
}

// Lookup returns an asset's content and whether hash is its current hash. A request for a
// known file under an old hash still gets the current content (a page rendered before a deploy
// keeps working) but must not be cached for long.
func Lookup(hash, name string) (data []byte, current bool, ok bool) {
	e, ok := index[name]
	if !ok {
		return nil, false, false
	}
	return e.data, e.hash == hash, true
}
