#version 450
// render_and_learn's scene: an animated height field of 64 x 64 quads (8,192 triangles) generated from
// gl_VertexIndex, so the draw needs no vertex buffer; tilted so that it folds over itself and the depth
// test decides which fold is seen.
layout(push_constant) uniform Frame { float time; } frame;
layout(location = 0) out vec3 color;

const int kGrid = 64;

void main() {
    const ivec2 corner[6] = ivec2[](ivec2(0, 0), ivec2(1, 0), ivec2(0, 1), ivec2(1, 0), ivec2(1, 1), ivec2(0, 1));
    const int quad = gl_VertexIndex / 6;
    const vec2 p = vec2(ivec2(quad % kGrid, quad / kGrid) + corner[gl_VertexIndex % 6]) / kGrid * 2.0 - 1.0;
    const float h = 0.35 * sin(4.0 * p.x + frame.time) * cos(3.0 * p.y - 0.7 * frame.time);
    const float c = cos(0.9), s = sin(0.9);  // about the x axis
    const vec3 v = vec3(p.x, c * h - s * p.y, s * h + c * p.y);
    gl_Position = vec4(0.8 * v.x, 0.8 * v.y, (v.z + 1.5) / 3.0, 1.0);  // orthographic, depth in (0, 1)
    color = mix(vec3(0.1, 0.3, 0.8), vec3(0.95, 0.8, 0.3), h / 0.7 + 0.5);
}
