#!/usr/bin/env python3
"""Draws the app icon (a GPU memory bar stacked by category under a capacity line) as
icon.svg and as PNGs for the web manifest, from one list of shapes. Standard library only:
    python3 public/make-icons.py      # rewrites public/icon.svg, icon-192.png, icon-512.png
The artwork stays inside the central 80 % so the PNGs also serve as maskable icons."""
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
# (x, y, w, h, corner radius, colour) on a 512 x 512 canvas, painted in order.
SHAPES = [
    (0, 0, 512, 512, 0, "#16213e"),            # full-bleed background (maskable)
    (136, 112, 240, 296, 28, "#0f1729"),       # the bar's well
    (160, 316, 192, 68, 10, "#0072b2"),        # parameters
    (160, 264, 192, 44, 10, "#009e73"),        # gradients
    (160, 200, 192, 56, 10, "#cc79a7"),        # optimizer state
    (160, 148, 192, 44, 10, "#e69f00"),        # activations
    (112, 124, 288, 10, 5, "#f5f5f5"),         # capacity line
]


def svg():
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 512 512">']
    for x, y, w, h, r, c in SHAPES:
        rr = f' rx="{r}"' if r else ""
        parts.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}"{rr} fill="{c}"/>')
    parts.append("</svg>\n")
    return "".join(parts)


def inside(px, py, x, y, w, h, r):
    if px < x or py < y or px > x + w or py > y + h:
        return False
    cx = min(max(px, x + r), x + w - r)
    cy = min(max(py, y + r), y + h - r)
    return (px - cx) ** 2 + (py - cy) ** 2 <= r * r


def rgb(c):
    return tuple(int(c[i:i + 2], 16) for i in (1, 3, 5))


def png(size, ss=3):
    k = 512 / size
    rows = []
    offsets = [(i + 0.5) / ss for i in range(ss)]
    shapes = [(x, y, w, h, r, rgb(c)) for x, y, w, h, r, c in SHAPES]
    for j in range(size):
        row = bytearray(b"\x00")
        for i in range(size):
            acc = [0, 0, 0]
            for oy in offsets:
                for ox in offsets:
                    px, py = (i + ox) * k, (j + oy) * k
                    col = (0, 0, 0)
                    for x, y, w, h, r, c in shapes:
                        if inside(px, py, x, y, w, h, r):
                            col = c
                    acc = [a + b for a, b in zip(acc, col)]
            row += bytes(round(a / (ss * ss)) for a in acc)
        rows.append(bytes(row))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    ihdr = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"".join(rows), 9)) + chunk(b"IEND", b"")


if __name__ == "__main__":
    with open(os.path.join(HERE, "icon.svg"), "w") as f:
        f.write(svg())
    for n in (192, 512):
        with open(os.path.join(HERE, f"icon-{n}.png"), "wb") as f:
            f.write(png(n))
