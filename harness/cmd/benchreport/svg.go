package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Chart is one horizontal bar chart of the report, written as SVG with the
// standard library: a bar per figure at its median, a whisker from its
// smallest to its largest sample, and an optional vertical mark (a target).
type Chart struct {
	File      string
	Title     string
	Unit      string
	Bars      []Bar
	Mark      float64 // 0: none
	MarkLabel string
	Legend    []string // a name per series, when the colours mean something
}

// Bar is one bar: a figure's summary and its series (colour).
type Bar struct {
	Label  string
	Stat   Stat
	Series int
}

var palette = []string{"#7f8c9a", "#2b6cb0", "#dd6b20", "#38a169"}

// niceCeil rounds v up to 1, 2, 2.5 or 5 times a power of ten, the axis's
// end.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if v <= m*p*(1+1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// SVG renders the chart.
func (c Chart) SVG() string {
	const (
		width, labelW, valueW = 820.0, 250.0, 110.0
		rowH, top, barH       = 26.0, 46.0, 16.0
	)
	plotW := width - labelW - valueW - 20
	height := top + rowH*float64(len(c.Bars)) + 44
	if len(c.Legend) > 0 {
		height += 20
	}
	maxV := c.Mark
	for _, b := range c.Bars {
		maxV = max(maxV, b.Stat.Max, b.Stat.Median)
	}
	axis := niceCeil(maxV)
	x := func(v float64) float64 { return labelW + plotW*v/axis }
	var s strings.Builder
	fmt.Fprintf(&s, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&s, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&s, `<text x="10" y="22" font-size="14" font-weight="bold">%s</text>`+"\n", html.EscapeString(c.Title))
	// Grid and axis: five steps.
	bottom := top + rowH*float64(len(c.Bars))
	for i := 0; i <= 5; i++ {
		v := axis * float64(i) / 5
		tick := fmtNum(v, c.Unit)
		if i == 0 {
			tick = "0"
		}
		fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e2e8f0"/>`+"\n", x(v), top-6, x(v), bottom)
		fmt.Fprintf(&s, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#4a5568">%s</text>`+"\n", x(v), bottom+16, html.EscapeString(tick))
	}
	for i, b := range c.Bars {
		y := top + rowH*float64(i)
		col := palette[b.Series%len(palette)]
		fmt.Fprintf(&s, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", labelW-8, y+barH-3, html.EscapeString(b.Label))
		fmt.Fprintf(&s, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", labelW, y, x(b.Stat.Median)-labelW, barH, col)
		if b.Stat.N > 1 && b.Stat.Max > b.Stat.Min {
			cy := y + barH/2
			fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#1a202c"/>`+"\n", x(b.Stat.Min), cy, x(b.Stat.Max), cy)
			for _, v := range []float64{b.Stat.Min, b.Stat.Max} {
				fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#1a202c"/>`+"\n", x(v), cy-4, x(v), cy+4)
			}
		}
		fmt.Fprintf(&s, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x(max(b.Stat.Max, b.Stat.Median))+6, y+barH-3,
			html.EscapeString(fmtValue(b.Stat.Median, c.Unit)))
	}
	if c.Mark > 0 {
		fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#c53030" stroke-dasharray="4 3"/>`+"\n", x(c.Mark), top-10, x(c.Mark), bottom)
		fmt.Fprintf(&s, `<text x="%.1f" y="%.1f" fill="#c53030">%s</text>`+"\n", x(c.Mark)+4, top-10, html.EscapeString(c.MarkLabel))
	}
	for i, name := range c.Legend {
		lx := labelW + float64(i)*180
		ly := bottom + 34
		fmt.Fprintf(&s, `<rect x="%.1f" y="%.1f" width="12" height="12" fill="%s"/>`+"\n", lx, ly-10, palette[i%len(palette)])
		fmt.Fprintf(&s, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+16, ly, html.EscapeString(name))
	}
	s.WriteString("</svg>\n")
	return s.String()
}
