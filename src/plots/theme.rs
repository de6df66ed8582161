//! Colours and sizes shared by every chart. Sizes are in CSS pixels and multiplied by
//! [`Theme::scale`], which the page sets to `devicePixelRatio` so canvases stay sharp on high-DPI
//! screens (plotters draws in backing-store pixels).

use plotters::style::RGBColor;

use crate::estimator::timeline::Category;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Theme {
    /// Backing-store pixels per CSS pixel.
    pub scale: f64,
}

impl Default for Theme {
    fn default() -> Self {
        Theme { scale: 1.0 }
    }
}

pub const INK: RGBColor = RGBColor(0x1f, 0x23, 0x28);
pub const MUTED: RGBColor = RGBColor(0x6a, 0x73, 0x7d);
pub const GRID: RGBColor = RGBColor(0xe5, 0xe7, 0xeb);
pub const MARK: RGBColor = RGBColor(0xd9, 0x2d, 0x20);
pub const CAPACITY: RGBColor = RGBColor(0x11, 0x11, 0x11);
/// The largest batch that fits.
pub const FIT: RGBColor = RGBColor(0x1a, 0x7f, 0x37);
/// Compute (the checkpoint chart's second axis).
pub const COMPUTE: RGBColor = RGBColor(0x6f, 0x42, 0xc1);
/// Background tints of the step's phases: forward, backward, optimizer.
pub const PHASE_TINTS: [RGBColor; 3] = [
    RGBColor(0xee, 0xf4, 0xfb),
    RGBColor(0xfb, 0xf3, 0xe9),
    RGBColor(0xf1, 0xee, 0xf8),
];

impl Theme {
    /// `px` CSS pixels in backing-store pixels, at least one.
    pub fn px(&self, px: f64) -> u32 {
        (px * self.scale).round().max(1.0) as u32
    }
    /// A font size in backing-store pixels.
    pub fn font(&self, px: f64) -> f64 {
        px * self.scale
    }
    /// The charts' one typeface at `px` CSS pixels.
    pub fn sans(&self, px: f64) -> plotters::style::FontDesc<'static> {
        use plotters::style::IntoFont;
        ("sans-serif", self.font(px)).into_font()
    }
}

/// One colour per memory category, stable across charts (a colour-blind-safe palette, Okabe–Ito
/// order, so neighbouring bands differ in lightness as well as hue).
pub fn category_color(c: Category) -> RGBColor {
    match c {
        Category::Params => RGBColor(0x00, 0x72, 0xb2),
        Category::Buffers => RGBColor(0x56, 0xb4, 0xe9),
        Category::Inputs => RGBColor(0x99, 0x99, 0x99),
        Category::Activations => RGBColor(0xe6, 0x9f, 0x00),
        Category::BackwardTemps => RGBColor(0xf0, 0xe4, 0x42),
        Category::Gradients => RGBColor(0x00, 0x9e, 0x73),
        Category::OptimizerState => RGBColor(0xcc, 0x79, 0xa7),
        Category::OptimizerTemps => RGBColor(0xd5, 0x5e, 0x00),
        // Teal, not black: the total and device-total lines are drawn in ink on top of the bands.
        Category::KvCache => RGBColor(0x00, 0x80, 0x80),
    }
}
