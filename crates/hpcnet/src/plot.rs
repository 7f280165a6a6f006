//! SVG plots (plotters, SVG backend only).

use plotters::prelude::*;
use std::path::Path;

pub struct Point {
    pub offered: f64,
    pub accepted: f64,
    pub mean: f64,
    pub p99: f64,
}

/// Two panels: latency (mean, p99) vs offered load, and accepted vs offered load.
pub fn latency_load(
    file: &Path,
    title: &str,
    pts: &[Point],
    bound: Option<f64>,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(file, (1100, 450)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(560);
    let xmax = pts
        .iter()
        .map(|p| p.offered)
        .fold(0.0, f64::max)
        .max(bound.unwrap_or(0.0))
        * 1.05
        + 1e-9;
    let ymax = pts.iter().map(|p| p.p99.max(p.mean)).fold(0.0, f64::max) * 1.1 + 1e-9;
    let mut c = ChartBuilder::on(&left)
        .caption(format!("{title}: latency vs offered load"), ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..xmax, 0.0..ymax)?;
    c.configure_mesh()
        .x_desc("offered load (fraction of injection bandwidth)")
        .y_desc("latency (ns)")
        .draw()?;
    c.draw_series(LineSeries::new(pts.iter().map(|p| (p.offered, p.mean)), &BLUE))?
        .label("mean")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    c.draw_series(pts.iter().map(|p| Circle::new((p.offered, p.mean), 3, BLUE.filled())))?;
    c.draw_series(LineSeries::new(pts.iter().map(|p| (p.offered, p.p99)), &RED))?
        .label("p99")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    c.configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    let amax = pts.iter().map(|p| p.accepted).fold(0.0, f64::max).max(xmax) * 1.05;
    let mut c2 = ChartBuilder::on(&right)
        .caption("accepted vs offered load", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..xmax, 0.0..amax)?;
    c2.configure_mesh()
        .x_desc("offered load")
        .y_desc("accepted load")
        .draw()?;
    c2.draw_series(LineSeries::new(pts.iter().map(|p| (p.offered, p.accepted)), &BLUE))?
        .label("accepted")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    c2.draw_series(LineSeries::new([(0.0, 0.0), (xmax, xmax)], BLACK.mix(0.3)))?;
    if let Some(b) = bound {
        c2.draw_series(LineSeries::new([(0.0, b), (xmax, b)], &RED))?
            .label("channel-load bound")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    }
    c2.configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    root.present()?;
    Ok(())
}
