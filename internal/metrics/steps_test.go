package metrics

import (
	"slices"
	"testing"
)

func TestSteps(t *testing.T) {
	got := steps(1e-4, 10)
	want := []float64{1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	if !slices.Equal(got, want) {
		t.Errorf("steps(1e-4, 10) = %v, want %v", got, want)
	}
	if got := steps(1e-4, 30); got[len(got)-1] != 25 {
		t.Errorf("steps(1e-4, 30) ends at %v, want 25", got[len(got)-1])
	}
}
