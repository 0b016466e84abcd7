package faults

import "testing"

func TestKnownCases(t *testing.T) {
	if ids, err := Selected(false, []string{"t03", "T11"}); err != nil || len(ids) != 2 || ids[0] != "T03" {
		t.Fatalf("%v %v", ids, err)
	}
	if _, err := Selected(false, []string{"T99"}); err == nil {
		t.Fatal("an unknown case was accepted")
	}
	all, _ := Selected(false, nil)
	quick, _ := Selected(true, nil)
	if len(all) != 30 || len(quick) == 0 || len(quick) >= len(all) {
		t.Fatalf("%d cases, %d quick", len(all), len(quick))
	}
}
