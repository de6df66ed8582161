//! One plotters backend for the page: a canvas (what users see) or an SVG string (the SVG
//! export). Every chart is drawn through this single type, so its drawing code exists once in
//! the WebAssembly instead of once per backend; styles and paths are made concrete before they
//! reach the inner backends for the same reason.

use std::fmt;

use plotters::prelude::*;
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind,
};
use plotters_canvas::CanvasBackend;

/// A canvas (with its 2D context, for measuring text) or an SVG document.
pub enum AnyBackend<'a> {
    Canvas(CanvasBackend, web_sys::CanvasRenderingContext2d),
    Svg(SVGBackend<'a>),
}

impl AnyBackend<'_> {
    /// The backend for a canvas; `None` without a 2D context.
    pub fn canvas(canvas: &web_sys::HtmlCanvasElement) -> Option<AnyBackend<'static>> {
        use wasm_bindgen::JsCast;
        let ctx = canvas
            .get_context("2d")
            .ok()
            .flatten()?
            .dyn_into::<web_sys::CanvasRenderingContext2d>()
            .ok()?;
        Some(AnyBackend::Canvas(
            CanvasBackend::with_canvas_object(canvas.clone())?,
            ctx,
        ))
    }
}

/// Paints a chart on a drawing area in a theme.
pub type Draw<'a> = dyn Fn(
        &DrawingArea<AnyBackend<'static>, plotters::coord::Shift>,
        &crate::plots::Theme,
    ) -> Result<(), crate::plots::PlotError>
    + 'a;

/// Sizes `canvas`'s backing store to its CSS box `css` × `devicePixelRatio` (sharp on high-DPI
/// screens) and lets `draw` paint it through this backend, at that scale.
pub fn paint_canvas(
    canvas: &web_sys::HtmlCanvasElement,
    css: (f64, f64),
    draw: &Draw<'_>,
) -> Result<(), crate::plots::PlotError> {
    let (w, h) =
        crate::ui::logic::state::backing_size(css, leptos::prelude::window().device_pixel_ratio());
    if canvas.width() != w {
        canvas.set_width(w);
    }
    if canvas.height() != h {
        canvas.set_height(h);
    }
    let root = AnyBackend::canvas(canvas)
        .ok_or_else(|| crate::plots::PlotError("the canvas has no 2D context".into()))?
        .into_drawing_area();
    draw(
        &root,
        &crate::plots::Theme {
            scale: w as f64 / css.0,
        },
    )?;
    root.present()?;
    Ok(())
}

/// A backend's error as text (canvas and SVG errors differ in type).
#[derive(Debug)]
pub struct BackendError(String);

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BackendError {}

fn conv<E: std::error::Error + Send + Sync>(
    e: DrawingErrorKind<E>,
) -> DrawingErrorKind<BackendError> {
    match e {
        DrawingErrorKind::DrawingError(e) => {
            DrawingErrorKind::DrawingError(BackendError(e.to_string()))
        }
        DrawingErrorKind::FontError(f) => DrawingErrorKind::FontError(f),
    }
}

/// A stroke or fill as plain data.
#[derive(Clone, Copy)]
struct Style {
    color: BackendColor,
    width: u32,
}

impl BackendStyle for Style {
    fn color(&self) -> BackendColor {
        self.color
    }
    fn stroke_width(&self) -> u32 {
        self.width
    }
}

fn style<S: BackendStyle>(s: &S) -> Style {
    Style {
        color: s.color(),
        width: s.stroke_width(),
    }
}

type R = Result<(), DrawingErrorKind<BackendError>>;

impl AnyBackend<'_> {
    fn line(&mut self, from: BackendCoord, to: BackendCoord, s: Style) -> R {
        match self {
            AnyBackend::Canvas(b, _) => b.draw_line(from, to, &s).map_err(conv),
            AnyBackend::Svg(b) => b.draw_line(from, to, &s).map_err(conv),
        }
    }
    fn rect(&mut self, a: BackendCoord, b2: BackendCoord, s: Style, fill: bool) -> R {
        match self {
            AnyBackend::Canvas(b, _) => b.draw_rect(a, b2, &s, fill).map_err(conv),
            AnyBackend::Svg(b) => b.draw_rect(a, b2, &s, fill).map_err(conv),
        }
    }
    fn path(&mut self, pts: Vec<BackendCoord>, s: Style) -> R {
        match self {
            AnyBackend::Canvas(b, _) => b.draw_path(pts, &s).map_err(conv),
            AnyBackend::Svg(b) => b.draw_path(pts, &s).map_err(conv),
        }
    }
    fn circle(&mut self, c: BackendCoord, r: u32, s: Style, fill: bool) -> R {
        match self {
            AnyBackend::Canvas(b, _) => b.draw_circle(c, r, &s, fill).map_err(conv),
            AnyBackend::Svg(b) => b.draw_circle(c, r, &s, fill).map_err(conv),
        }
    }
    fn polygon(&mut self, pts: Vec<BackendCoord>, s: Style) -> R {
        match self {
            AnyBackend::Canvas(b, _) => b.fill_polygon(pts, &s).map_err(conv),
            AnyBackend::Svg(b) => b.fill_polygon(pts, &s).map_err(conv),
        }
    }
}

impl DrawingBackend for AnyBackend<'_> {
    type ErrorType = BackendError;

    fn get_size(&self) -> (u32, u32) {
        match self {
            AnyBackend::Canvas(b, _) => b.get_size(),
            AnyBackend::Svg(b) => b.get_size(),
        }
    }
    fn ensure_prepared(&mut self) -> R {
        match self {
            AnyBackend::Canvas(b, _) => b.ensure_prepared().map_err(conv),
            AnyBackend::Svg(b) => b.ensure_prepared().map_err(conv),
        }
    }
    fn present(&mut self) -> R {
        match self {
            AnyBackend::Canvas(b, _) => b.present().map_err(conv),
            AnyBackend::Svg(b) => b.present().map_err(conv),
        }
    }
    fn draw_pixel(&mut self, p: BackendCoord, c: BackendColor) -> R {
        match self {
            AnyBackend::Canvas(b, _) => b.draw_pixel(p, c).map_err(conv),
            AnyBackend::Svg(b) => b.draw_pixel(p, c).map_err(conv),
        }
    }
    fn draw_line<S: BackendStyle>(&mut self, from: BackendCoord, to: BackendCoord, s: &S) -> R {
        self.line(from, to, style(s))
    }
    fn draw_rect<S: BackendStyle>(
        &mut self,
        a: BackendCoord,
        b: BackendCoord,
        s: &S,
        fill: bool,
    ) -> R {
        self.rect(a, b, style(s), fill)
    }
    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        s: &S,
    ) -> R {
        self.path(path.into_iter().collect(), style(s))
    }
    fn draw_circle<S: BackendStyle>(&mut self, c: BackendCoord, r: u32, s: &S, fill: bool) -> R {
        self.circle(c, r, style(s), fill)
    }
    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        s: &S,
    ) -> R {
        self.polygon(vert.into_iter().collect(), style(s))
    }
    fn draw_text<T: BackendTextStyle>(&mut self, text: &str, s: &T, pos: BackendCoord) -> R {
        match self {
            AnyBackend::Canvas(b, _) => b.draw_text(text, s, pos).map_err(conv),
            AnyBackend::Svg(b) => b.draw_text(text, s, pos).map_err(conv),
        }
    }
    /// On a canvas, `measureText` with the font the canvas draws with. plotters' default asks
    /// the page's layout (a hidden `span` read back with `offsetWidth`), a reflow per label.
    fn estimate_text_size<T: BackendTextStyle>(
        &self,
        text: &str,
        s: &T,
    ) -> Result<(u32, u32), DrawingErrorKind<BackendError>> {
        match self {
            AnyBackend::Canvas(_, ctx) => {
                ctx.set_font(&format!(
                    "{} {}px {}",
                    s.style().as_str(),
                    s.size(),
                    s.family().as_str()
                ));
                let w = ctx.measure_text(text).map(|m| m.width()).unwrap_or(0.0);
                Ok((w.ceil() as u32, (s.size() * 1.2).ceil() as u32))
            }
            AnyBackend::Svg(b) => b.estimate_text_size(text, s).map_err(conv),
        }
    }
    fn blit_bitmap(&mut self, pos: BackendCoord, size: (u32, u32), src: &[u8]) -> R {
        match self {
            AnyBackend::Canvas(b, _) => b.blit_bitmap(pos, size, src).map_err(conv),
            AnyBackend::Svg(b) => b.blit_bitmap(pos, size, src).map_err(conv),
        }
    }
}
