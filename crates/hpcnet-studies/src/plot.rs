//! Figures of a study (curves with published reference marks) and their SVG rendering with
//! plotters' SVG backend. A study fills [`Figure`]s with data; [`svg`] draws them side by side.

use plotters::prelude::*;

/// How a series is drawn.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Style {
    /// Solid line with point markers (simulated data).
    Line,
    /// Dashed line without markers (a published formula or curve).
    Dashed,
    /// Markers only.
    Points,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    pub style: Style,
    /// Index into the palette; series of one configuration share a colour.
    pub color: usize,
}

/// A labelled reference line at a published value: vertical at `x` or horizontal at `y`.
#[derive(Clone, Debug, PartialEq)]
pub enum Mark {
    X(String, f64),
    Y(String, f64),
}

/// One panel.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// Logarithmic (base 10) y axis; non-positive values are left out.
    pub y_log: bool,
    pub series: Vec<Series>,
    pub marks: Vec<Mark>,
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

const PANEL: (u32, u32) = (620, 460);

/// The figures side by side in one SVG document.
pub fn svg(figures: &[Figure]) -> Result<String, String> {
    let mut buf = String::new();
    {
        let size = (PANEL.0 * figures.len().max(1) as u32, PANEL.1);
        let root = SVGBackend::with_string(&mut buf, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let panels = root.split_evenly((1, figures.len().max(1)));
        for (f, area) in figures.iter().zip(&panels) {
            draw(f, area).map_err(|e| format!("{}: {e}", f.title))?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(buf)
}

fn draw<DB: DrawingBackend>(f: &Figure, area: &DrawingArea<DB, plotters::coord::Shift>) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let ty = |y: f64| if f.y_log { y.log10() } else { y };
    let pts = |s: &Series| -> Vec<(f64, f64)> {
        s.points
            .iter()
            .filter(|p| p.0.is_finite() && p.1.is_finite() && (!f.y_log || p.1 > 0.0))
            .map(|&(x, y)| (x, ty(y)))
            .collect()
    };
    let all: Vec<(f64, f64)> = f.series.iter().flat_map(pts).collect();
    let mut xs: Vec<f64> = all.iter().map(|p| p.0).collect();
    let mut ys: Vec<f64> = all.iter().map(|p| p.1).collect();
    for m in &f.marks {
        match m {
            Mark::X(_, x) => xs.push(*x),
            Mark::Y(_, y) if !f.y_log || *y > 0.0 => ys.push(ty(*y)),
            Mark::Y(..) => {}
        }
    }
    let range = |v: &[f64], zero: bool| -> (f64, f64) {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if !lo.is_finite() {
            return (0.0, 1.0);
        }
        let lo = if zero { lo.min(0.0) } else { lo };
        let pad = ((hi - lo) * 0.05).max(1e-9);
        (if zero && lo >= 0.0 { lo } else { lo - pad }, hi + pad)
    };
    let (x0, x1) = range(&xs, false);
    let (y0, y1) = range(&ys, !f.y_log);
    let mut chart = ChartBuilder::on(area)
        .caption(&f.title, ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(err)?;
    let y_fmt = |v: &f64| {
        let y = if f.y_log { 10f64.powf(*v) } else { *v };
        crate::report::fmt_num(if f.y_log { round_sig(y, 2) } else { y })
    };
    chart
        .configure_mesh()
        .x_desc(f.x_label.as_str())
        .y_desc(if f.y_log {
            format!("{} (log scale)", f.y_label)
        } else {
            f.y_label.clone()
        })
        .y_label_formatter(&y_fmt)
        .draw()
        .map_err(err)?;
    for s in &f.series {
        let color = PALETTE[s.color % PALETTE.len()];
        let p = pts(s);
        match s.style {
            Style::Line => {
                chart
                    .draw_series(LineSeries::new(p.clone(), color.stroke_width(2)))
                    .map_err(err)?
                    .label(s.label.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
                chart
                    .draw_series(p.iter().map(|&q| Circle::new(q, 3, color.filled())))
                    .map_err(err)?;
            }
            Style::Dashed => {
                chart
                    .draw_series(DashedLineSeries::new(p, 6, 4, color.stroke_width(1)))
                    .map_err(err)?
                    .label(s.label.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(1)));
            }
            Style::Points => {
                chart
                    .draw_series(p.iter().map(|&q| Cross::new(q, 5, color.stroke_width(2))))
                    .map_err(err)?
                    .label(s.label.as_str())
                    .legend(move |(x, y)| Cross::new((x + 10, y), 5, color.stroke_width(2)));
            }
        }
    }
    let grey = RGBColor(90, 90, 90);
    // Labels of vertical marks go down the top edge one line apart, to the right of their line;
    // labels of horizontal marks sit above their line on the right (the legend is upper left).
    let (dx, dy) = ((x1 - x0) / 100.0, (y1 - y0) / 100.0);
    for (i, m) in f.marks.iter().enumerate() {
        let (line, label, at) = match m {
            Mark::X(l, x) => (vec![(*x, y0), (*x, y1)], l, (*x + dx, y1 - (2.0 + 5.0 * i as f64) * dy)),
            Mark::Y(l, y) if !f.y_log || *y > 0.0 => {
                (vec![(x0, ty(*y)), (x1, ty(*y))], l, (x0 + 62.0 * dx, ty(*y) + 4.0 * dy))
            }
            Mark::Y(..) => continue,
        };
        chart
            .draw_series(DashedLineSeries::new(line, 3, 3, grey.stroke_width(1)))
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(Text::new(
                label.clone(),
                at,
                ("sans-serif", 12).into_font().color(&grey),
            )))
            .map_err(err)?;
    }
    if f.series.iter().any(|s| !s.label.is_empty()) {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.85))
            .draw()
            .map_err(err)?;
    }
    Ok(())
}

/// `x` rounded to `digits` significant digits (log-axis tick labels).
fn round_sig(x: f64, digits: i32) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let scale = 10f64.powi(digits - 1 - x.abs().log10().floor() as i32);
    (x * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_panels_with_marks_and_log_axis() {
        let fig = |y_log| Figure {
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            y_log,
            series: vec![
                Series {
                    label: "sim".into(),
                    points: vec![(0.1, 10.0), (0.5, 20.0), (1.0, 5000.0)],
                    style: Style::Line,
                    color: 0,
                },
                Series {
                    label: "paper".into(),
                    points: vec![(0.1, 12.0), (1.0, 0.0)],
                    style: Style::Dashed,
                    color: 1,
                },
                Series {
                    label: "pts".into(),
                    points: vec![(0.2, 30.0)],
                    style: Style::Points,
                    color: 2,
                },
            ],
            marks: vec![Mark::X("paper knee".into(), 0.65), Mark::Y("ref".into(), 100.0)],
        };
        let s = svg(&[fig(true), fig(false)]).unwrap();
        assert!(s.starts_with("<svg"), "{}", &s[..40]);
        assert!(s.contains("paper knee"));
        assert!(s.contains("width=\"1240\""));
    }
}
