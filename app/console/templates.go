package console

import (
	"encoding/json"
	"fmt"
	"html/template"
	"strings"
	"time"
)

// pageNames are the templates under templates/, each a page drawn in
// frame.html's frame.
var pageNames = []string{"login", "error", "done", "overview", "failures", "failure", "plan", "redrives", "redrive", "journey", "audit", "topology"}

// funcs are the helpers the templates use.
var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"iso": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	},
	"join": strings.Join,
	// bytes is a size in bytes as a person reads it: 512 B, 3.2 MiB.
	"bytes": func(n int64) string {
		const unit = 1024
		if n < unit {
			return fmt.Sprintf("%d B", n)
		}
		div, exp := int64(unit), 0
		for m := n / unit; m >= unit; m /= unit {
			div *= unit
			exp++
		}
		return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
	},
	"percent": func(part, whole int) int {
		if whole <= 0 {
			return 0
		}
		return part * 100 / whole
	},
	// string is an audit detail's value as text: a string as it is,
	// anything else as JSON ({"queue": 3}, not map[queue:3]).
	"string": func(v any) string {
		if s, ok := v.(string); ok {
			return s
		}
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Sprint(v)
		}
		return string(b)
	},
	// lineY is the offset of a box's line i below its top, under its
	// title.
	"lineY": func(i int) int { return 14 + (i+1)*lineHeight },
}

// parsePages parses each page with the frame.
func parsePages() (map[string]*template.Template, error) {
	pages := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(files, "templates/frame.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: parse the %s page: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}
