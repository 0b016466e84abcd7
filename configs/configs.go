// Package configs holds base.yaml and one overlay per environment,
// embedded in the binary so it runs from any directory; `--config-dir`
// reads a directory on disk instead.
package configs

import "embed"

// FS holds the YAML files.
//
//go:embed *.yaml
var FS embed.FS
