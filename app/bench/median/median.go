// Package median is the figure the benches print for their rounds: the
// middle one, which a single slow or fast round does not move.
package median

import "slices"

// Of is the median of v, the upper of the two middle values when v has
// an even length; v is left as it was. v must not be empty.
func Of(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	return s[len(s)/2]
}
