/* gs_tensors.c: the tensor table of FORMAT.md section 4. Checks it against the tensors the
 * config requires (step 11: names, order, dtypes, shapes, nbytes; step 12: offsets inside the
 * payload) and turns its entries into views of the weights (gs_weights, gs_layer_view).
 *
 * The per-layer views are not stored: an entry is re-read from the (validated) table when a
 * layer runs, so the engine keeps no array sized by n_layer and needs no heap. */
#include "gs_internal.h"

/* Tensor-table entry fields (FORMAT.md section 4). */
enum {
    E_NAME = 0,
    E_DTYPE = 48,
    E_NDIM = 52,
    E_SHAPE = 56,
    E_OFFSET = 72,
    E_NBYTES = 76,
    E_SCALE_OFFSET = 80,
    E_RESERVED = 84 /* u32[3] */
};

/* One tensor of a block: shape entries are multiples of C. A matrix (cols_c != 0) is int8, a
 * vector float32 (section 4). */
typedef struct {
    const char *suffix; /* after "h.{i}." */
    uint8_t rows_c;     /* shape[0] / C */
    uint8_t cols_c;     /* shape[1] / C, 0 for a vector */
} layer_tensor;

/* Section 4's order within one layer: each weight followed by its bias (the odd entries, present
 * only with GS_FLAG_BIAS). */
static const layer_tensor layer_tensors[12] = {
    {"ln_1.weight", 1, 0},
    {"ln_1.bias", 1, 0},
    {"attn.c_attn.weight", 3, 1},
    {"attn.c_attn.bias", 3, 0},
    {"attn.c_proj.weight", 1, 1},
    {"attn.c_proj.bias", 1, 0},
    {"ln_2.weight", 1, 0},
    {"ln_2.bias", 1, 0},
    {"mlp.c_fc.weight", 4, 1},
    {"mlp.c_fc.bias", 4, 0},
    {"mlp.c_proj.weight", 1, 4},
    {"mlp.c_proj.bias", 1, 0},
};

typedef struct {
    char name[GS_NAME_BYTES];
    uint32_t dtype;
    uint32_t ndim;
    uint64_t shape[GS_MAX_NDIM]; /* unused entries 0 */
} expected_tensor;

static uint32_t has_bias(const gs_config *c)
{
    return (c->flags & GS_FLAG_BIAS) ? 1u : 0u;
}

static uint32_t tensors_per_layer(const gs_config *c)
{
    return has_bias(c) ? 12u : 6u;
}

/* Number of tensors section 4 requires for this config. */
static uint64_t tensors_expected(const gs_config *c)
{
    /* wte, wpe, the blocks, ln_f.weight (+ ln_f.bias) */
    return 2u + (uint64_t)c->n_layer * tensors_per_layer(c) + 1u + has_bias(c);
}

/* Append a NUL-terminated string at name[*n]; names are short (<= 31 bytes), see below. */
static void name_append(char *name, uint32_t *n, const char *s)
{
    while (*s != '\0') name[(*n)++] = *s++;
    name[*n] = '\0';
}

/* "h.{l}." prefix; the longest name is "h.4294967295.attn.c_attn.weight", 31 bytes. */
static void name_layer_prefix(char *name, uint32_t *n, uint32_t l)
{
    char digits[10];
    uint32_t k = 0;
    name_append(name, n, "h.");
    do {
        digits[k++] = (char)('0' + l % 10u);
        l /= 10u;
    } while (l != 0);
    while (k > 0) name[(*n)++] = digits[--k];
    name_append(name, n, ".");
}

/* An int8 matrix (rows, cols), or for cols 0 a float32 vector (rows): section 4's two kinds. */
static void set_shape(expected_tensor *e, uint64_t rows, uint64_t cols)
{
    e->dtype = cols != 0 ? GS_DTYPE_I8 : GS_DTYPE_F32;
    e->ndim = cols != 0 ? 2u : 1u;
    e->shape[0] = rows;
    e->shape[1] = cols;
    e->shape[2] = e->shape[3] = 0;
}

/* The index-th tensor section 4 requires for config c (index < tensors_expected). */
static void expected_at(const gs_config *c, uint64_t index, expected_tensor *e)
{
    uint64_t C = c->n_embd;
    uint64_t layers_end = 2u + (uint64_t)c->n_layer * tensors_per_layer(c);
    uint32_t n = 0;
    e->name[0] = '\0';
    if (index == 0) {
        name_append(e->name, &n, "wte.weight");
        set_shape(e, c->vocab_size, C);
    } else if (index == 1) {
        name_append(e->name, &n, "wpe.weight");
        set_shape(e, c->block_size, C);
    } else if (index < layers_end) {
        uint64_t i = index - 2u;
        uint32_t l = (uint32_t)(i / tensors_per_layer(c));
        uint32_t slot = (uint32_t)(i % tensors_per_layer(c));
        const layer_tensor *t = &layer_tensors[has_bias(c) ? slot : 2u * slot]; /* skip biases */
        name_layer_prefix(e->name, &n, l);
        name_append(e->name, &n, t->suffix);
        set_shape(e, t->rows_c * C, t->cols_c * C);
    } else {
        name_append(e->name, &n, index == layers_end ? "ln_f.weight" : "ln_f.bias");
        set_shape(e, C, 0);
    }
}

/* Step 11 for one entry. */
static gs_status check_entry(const uint8_t *entry, const expected_tensor *e)
{
    uint32_t i;
    uint64_t count = 1;
    uint32_t ended = 0;
    for (i = 0; i < GS_NAME_BYTES; i++) { /* the name, then only NULs (at least one) */
        uint8_t want = ended ? 0u : (uint8_t)e->name[i];
        if (entry[E_NAME + i] != want) return GS_ERR_TENSOR;
        if (want == 0) ended = 1;
    }
    if (gs_rd_u32(entry + E_DTYPE) != e->dtype) return GS_ERR_TENSOR;
    if (gs_rd_u32(entry + E_NDIM) != e->ndim) return GS_ERR_TENSOR;
    for (i = 0; i < GS_MAX_NDIM; i++) {
        uint64_t want = e->shape[i];
        if ((uint64_t)gs_u32_at(entry + E_SHAPE, i) != want) return GS_ERR_TENSOR;
        if (i < e->ndim) count *= want;
    }
    if ((uint64_t)gs_rd_u32(entry + E_NBYTES) != count * (e->dtype == GS_DTYPE_F32 ? 4u : 1u)) {
        return GS_ERR_TENSOR;
    }
    for (i = 0; i < 3; i++) {
        if (gs_u32_at(entry + E_RESERVED, i) != 0) return GS_ERR_TENSOR;
    }
    return GS_OK;
}

/* [off, off + n) aligned and inside [begin, end). */
static int inside(uint64_t off, uint64_t n, uint64_t begin, uint64_t end)
{
    return off % GS_ALIGN == 0 && off >= begin && off <= end && n <= end - off;
}

/* Step 12 for one (step-11-valid) entry. */
static gs_status check_entry_offsets(const uint8_t *entry, uint64_t begin, uint64_t end)
{
    uint32_t dtype = gs_rd_u32(entry + E_DTYPE);
    uint64_t scale_off = gs_rd_u32(entry + E_SCALE_OFFSET);
    if (!inside(gs_rd_u32(entry + E_OFFSET), gs_rd_u32(entry + E_NBYTES), begin, end)) {
        return GS_ERR_OFFSET;
    }
    if (dtype == GS_DTYPE_I8) {
        uint64_t rows = gs_u32_at(entry + E_SHAPE, 0);
        if (!inside(scale_off, 4u * rows, begin, end)) return GS_ERR_OFFSET;
    } else if (scale_off != 0) {
        return GS_ERR_OFFSET;
    }
    return GS_OK;
}

gs_status gs_tensors_check(const gs_model *model, const uint8_t *table, uint32_t n_tensors,
                           uint64_t payload_offset, uint64_t payload_bytes)
{
    const gs_config *c = &model->config;
    uint64_t i;
    if ((uint64_t)n_tensors != tensors_expected(c)) return GS_ERR_TENSOR;
    for (i = 0; i < n_tensors; i++) {                                      /* step 11 */
        expected_tensor e;
        gs_status st;
        expected_at(c, i, &e);
        st = check_entry(table + i * GS_TENSOR_ENTRY_BYTES, &e);
        if (st != GS_OK) return st;
    }
    for (i = 0; i < n_tensors; i++) {                                      /* step 12 */
        gs_status st = check_entry_offsets(table + i * GS_TENSOR_ENTRY_BYTES, payload_offset,
                                           payload_offset + payload_bytes);
        if (st != GS_OK) return st;
    }
    return GS_OK;
}

/* ---- views (the table is valid from here on) ---- */

static const uint8_t *entry_data(const gs_model *m, const uint8_t *entry)
{
    return m->data + gs_rd_u32(entry + E_OFFSET);
}

/* The f32 vector of the entry at *cursor, then advance. */
static const uint8_t *next_vector(const gs_model *m, const uint8_t **cursor)
{
    const uint8_t *v = entry_data(m, *cursor);
    *cursor += GS_TENSOR_ENTRY_BYTES;
    return v;
}

/* The bias at *cursor when the artifact has biases (then advance), else NULL. */
static const uint8_t *next_bias(const gs_model *m, const uint8_t **cursor)
{
    return has_bias(&m->config) ? next_vector(m, cursor) : NULL;
}

static gs_qmatrix next_matrix(const gs_model *m, const uint8_t **cursor)
{
    const uint8_t *e = *cursor;
    gs_qmatrix w;
    w.q = (const int8_t *)(const void *)entry_data(m, e);
    w.scale = m->data + gs_rd_u32(e + E_SCALE_OFFSET);
    w.rows = gs_u32_at(e + E_SHAPE, 0);
    w.cols = gs_u32_at(e + E_SHAPE, 1);
    *cursor += GS_TENSOR_ENTRY_BYTES;
    return w;
}

void gs_tensors_bind(gs_model *model, const uint8_t *table)
{
    const uint8_t *cursor = table;
    const uint8_t *tail;
    gs_weights *w = &model->weights;
    w->tensor_table = table;
    w->wte = next_matrix(model, &cursor);
    w->wpe = next_matrix(model, &cursor);
    tail = table + (2u + (size_t)model->config.n_layer * tensors_per_layer(&model->config)) *
                       GS_TENSOR_ENTRY_BYTES;
    w->ln_f_w = next_vector(model, &tail);
    w->ln_f_b = next_bias(model, &tail);
}

void gs_layer_view(const gs_model *model, uint32_t l, gs_layer *layer)
{
    const uint8_t *cursor = model->weights.tensor_table +
                            (2u + (size_t)l * tensors_per_layer(&model->config)) *
                                GS_TENSOR_ENTRY_BYTES;
    layer->ln_1_w = next_vector(model, &cursor);
    layer->ln_1_b = next_bias(model, &cursor);
    layer->c_attn = next_matrix(model, &cursor);
    layer->c_attn_b = next_bias(model, &cursor);
    layer->attn_c_proj = next_matrix(model, &cursor);
    layer->attn_c_proj_b = next_bias(model, &cursor);
    layer->ln_2_w = next_vector(model, &cursor);
    layer->ln_2_b = next_bias(model, &cursor);
    layer->c_fc = next_matrix(model, &cursor);
    layer->c_fc_b = next_bias(model, &cursor);
    layer->mlp_c_proj = next_matrix(model, &cursor);
    layer->mlp_c_proj_b = next_bias(model, &cursor);
}
