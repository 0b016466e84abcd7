package bench

import "slices"

// paired gathers the rounds of a figure measured in pairs, moenda's and
// the raw client's one after the other, so that both meet the machine in
// the same state; a round's ratio is taken within it.
type paired struct {
	mine, raw []flow
}

// round runs one round: raw then mine, or mine then raw on odd rounds,
// so neither always runs on what the other left (a checkpoint, a warm
// cache).
func (p *paired) round(raw, mine func() (flow, error)) error {
	first, second := raw, mine
	odd := len(p.mine)%2 == 1
	if odd {
		first, second = mine, raw
	}
	a, err := first()
	if err != nil {
		return err
	}
	b, err := second()
	if err != nil {
		return err
	}
	if odd {
		a, b = b, a
	}
	p.raw, p.mine = append(p.raw, a), append(p.mine, b)
	return nil
}

// row fills row's Value and Ceiling with the medians of the rounds, its
// Ratio with the median of their ratios and Spread with the lowest and
// highest, and its CPU with the median of each role's over moenda's
// rounds. Its CPU ratio is moenda's process over the raw client's.
func (p *paired) row(row Row) Row {
	rates, ceilings, ratios, cpuRatios := make([]float64, 0, len(p.mine)), []float64{}, []float64{}, []float64{}
	perRole := map[string][]float64{}
	for i, mine := range p.mine {
		raw := p.raw[i]
		rates, ceilings = append(rates, mine.rate), append(ceilings, raw.rate)
		ratios = append(ratios, mine.rate/raw.rate)
		for role := range mine.cpu {
			perRole[role] = append(perRole[role], mine.per10k(role))
		}
		if client := raw.per10k(procClient); client > 0 {
			cpuRatios = append(cpuRatios, mine.per10k(procMoenda)/client)
		}
	}
	row.Value, row.Ceiling = median(rates), median(ceilings)
	row.Ratio, row.Spread = median(ratios), []float64{slices.Min(ratios), slices.Max(ratios)}
	row.CPU = map[string]float64{}
	for role, v := range perRole {
		row.CPU[role] = median(v)
	}
	if len(cpuRatios) > 0 {
		row.CPURatio, row.CPUSpread = median(cpuRatios), []float64{slices.Min(cpuRatios), slices.Max(cpuRatios)}
	}
	return row
}
