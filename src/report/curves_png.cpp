// The chart as PNG (report/curves.h): librsvg renders the SVG onto a cairo
// surface, when the build has them (SHARDTRAIN_HAVE_RSVG).
#include "shardtrain/report/curves.h"

#include <cmath>
#include <memory>

#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"

#ifdef SHARDTRAIN_HAVE_RSVG
#include <cairo.h>
#include <librsvg/rsvg.h>
#endif

namespace shardtrain {

#ifdef SHARDTRAIN_HAVE_RSVG
namespace {

struct GObjectUnref {
  void operator()(gpointer p) const { g_object_unref(p); }
};
struct CairoDestroy {
  void operator()(cairo_t* cr) const { cairo_destroy(cr); }
};
struct SurfaceDestroy {
  void operator()(cairo_surface_t* s) const { cairo_surface_destroy(s); }
};
std::string take_message(GError* error) {
  const std::string message = error && error->message ? error->message : "unknown error";
  if (error) g_error_free(error);
  return message;
}
cairo_status_t append_png(void* closure, const unsigned char* data, unsigned int length) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
  return CAIRO_STATUS_SUCCESS;
}

}  // namespace
#endif

bool curves_png_supported() {
#ifdef SHARDTRAIN_HAVE_RSVG
  return true;
#else
  return false;
#endif
}

void write_curves_png(const std::string& svg, const std::string& path) {
#ifdef SHARDTRAIN_HAVE_RSVG
  GError* error = nullptr;
  std::unique_ptr<RsvgHandle, GObjectUnref> handle(
      rsvg_handle_new_from_data(reinterpret_cast<const guint8*>(svg.data()), svg.size(), &error));
  if (!handle) throw Error("cannot render the chart (librsvg): " + take_message(error));
  gdouble width = 0, height = 0;
  if (!rsvg_handle_get_intrinsic_size_in_pixels(handle.get(), &width, &height)) width = 960, height = 860;
  std::unique_ptr<cairo_surface_t, SurfaceDestroy> surface(
      cairo_image_surface_create(CAIRO_FORMAT_RGB24, static_cast<int>(std::ceil(width)),
                                 static_cast<int>(std::ceil(height))));
  std::unique_ptr<cairo_t, CairoDestroy> cr(cairo_create(surface.get()));
  cairo_set_source_rgb(cr.get(), 1, 1, 1);
  cairo_paint(cr.get());
  const RsvgRectangle viewport = {0, 0, width, height};
  if (!rsvg_handle_render_document(handle.get(), cr.get(), &viewport, &error))
    throw Error("cannot render the chart (librsvg): " + take_message(error));
  std::string png;
  const cairo_status_t status = cairo_surface_write_to_png_stream(surface.get(), append_png, &png);
  if (status != CAIRO_STATUS_SUCCESS)
    throw Error(std::string("cannot encode the PNG (cairo): ") + cairo_status_to_string(status));
  write_file_atomic(path, png);
#else
  (void)svg;
  throw Error("--output " + path + ": this shardtrain was built without librsvg, which renders PNG; install "
              "librsvg2-dev (Debian) and rebuild, or write .svg and convert it (rsvg-convert from librsvg2-bin)");
#endif
}

}  // namespace shardtrain
