package median

import (
	"slices"
	"testing"
)

func TestOf(t *testing.T) {
	v := []float64{5, 1, 4, 2, 3}
	if got := Of(v); got != 3 {
		t.Fatalf("Of(%v) = %v, want 3", v, got)
	}
	if !slices.Equal(v, []float64{5, 1, 4, 2, 3}) {
		t.Fatalf("Of sorted its argument: %v", v)
	}
	if got := Of([]float64{4, 1, 3, 2}); got != 3 {
		t.Fatalf("Of of an even length = %v, want the upper middle 3", got)
	}
}
