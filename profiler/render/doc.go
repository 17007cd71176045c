// Package render holds the report's renderers, one package per format:
// text (terminal tables), json (the report model), html (one
// self-contained page with plots) and perfetto (a Chrome trace-event JSON
// for ui.perfetto.dev). Each has one entry point, Render(w, *report.Report).
package render
