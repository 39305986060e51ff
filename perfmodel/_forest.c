/* Compiled tree-ensemble walk for perfmodel.forest.Forest (optional: without it the predictor walks
 * the same flat arrays with numpy and gets the same leaves).
 *
 * walk(x, nf, roots, feature, threshold, child, value, depth, base, out): for every row r of x (float32,
 * rows x nf, C order) out[r] = base + sum over trees of value[leaf], where a tree is walked from its root
 * by depth steps of node = child[node] + (x[r, feature[node]] >= threshold[node]) (leaves are their own
 * child with a NaN threshold, see Forest). roots, feature and child hold Py_ssize_t (numpy intp),
 * threshold float32, value and out float64. Rows are walked in blocks of BLOCK through one tree at a
 * time, so the CPU overlaps the blocks' independent chains of dependent loads instead of waiting on one.
 * Buffer sizes are checked here; the node arrays' contents (child and feature indices in range) are
 * checked once by Forest when it is built. The GIL is released during the walk.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define BLOCK 16

static void
walk_rows(const float *x, Py_ssize_t rows, Py_ssize_t nf, const Py_ssize_t *roots, Py_ssize_t ntrees,
          const Py_ssize_t *feature, const float *threshold, const Py_ssize_t *child, const double *value,
          Py_ssize_t depth, double base, double *out)
{
    for (Py_ssize_t r0 = 0; r0 < rows; r0 += BLOCK) {
        Py_ssize_t nb = rows - r0 < BLOCK ? rows - r0 : BLOCK;
        const float *xb = x + r0 * nf;
        double sum[BLOCK];
        for (Py_ssize_t k = 0; k < nb; k++)
            sum[k] = 0.0;
        for (Py_ssize_t t = 0; t < ntrees; t++) {
            Py_ssize_t node[BLOCK];
            for (Py_ssize_t k = 0; k < nb; k++)
                node[k] = roots[t];
            for (Py_ssize_t d = 0; d < depth; d++) {
                for (Py_ssize_t k = 0; k < nb; k++) {
                    Py_ssize_t m = node[k];
                    node[k] = child[m] + (xb[k * nf + feature[m]] >= threshold[m]);
                }
            }
            for (Py_ssize_t k = 0; k < nb; k++)
                sum[k] += value[node[k]];
        }
        for (Py_ssize_t k = 0; k < nb; k++)
            out[r0 + k] = sum[k] + base;
    }
}

static PyObject *
forest_walk(PyObject *self, PyObject *args)
{
    Py_buffer x, roots, feature, threshold, child, value, out;
    Py_ssize_t nf, depth;
    double base;
    PyObject *result = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*ny*y*y*y*y*ndw*", &x, &nf, &roots, &feature, &threshold, &child,
                          &value, &depth, &base, &out))
        return NULL;
    Py_ssize_t nodes = feature.len / (Py_ssize_t)sizeof(Py_ssize_t);
    Py_ssize_t rows = nf > 0 ? x.len / (nf * (Py_ssize_t)sizeof(float)) : 0;
    if (nf <= 0 || depth < 0 || x.len != rows * nf * (Py_ssize_t)sizeof(float)) {
        PyErr_SetString(PyExc_ValueError, "x must hold rows x nf float32 values, nf > 0, depth >= 0");
    } else if (roots.len % (Py_ssize_t)sizeof(Py_ssize_t) != 0 ||
               feature.len != nodes * (Py_ssize_t)sizeof(Py_ssize_t) ||
               child.len != feature.len ||
               threshold.len != nodes * (Py_ssize_t)sizeof(float) ||
               value.len != nodes * (Py_ssize_t)sizeof(double)) {
        PyErr_SetString(PyExc_ValueError, "node arrays of different lengths or item sizes");
    } else if (out.len != rows * (Py_ssize_t)sizeof(double)) {
        PyErr_SetString(PyExc_ValueError, "out must hold one float64 per row of x");
    } else {
        Py_BEGIN_ALLOW_THREADS
        walk_rows((const float *)x.buf, rows, nf, (const Py_ssize_t *)roots.buf,
                  roots.len / (Py_ssize_t)sizeof(Py_ssize_t), (const Py_ssize_t *)feature.buf,
                  (const float *)threshold.buf, (const Py_ssize_t *)child.buf, (const double *)value.buf,
                  depth, base, (double *)out.buf);
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&x);
    PyBuffer_Release(&roots);
    PyBuffer_Release(&feature);
    PyBuffer_Release(&threshold);
    PyBuffer_Release(&child);
    PyBuffer_Release(&value);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"walk", forest_walk, METH_VARARGS,
     "walk(x, nf, roots, feature, threshold, child, value, depth, base, out): sum of leaf values plus "
     "base per row of x, written to out."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "perfmodel._forest", "Compiled tree-ensemble walk for perfmodel.predictor.", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__forest(void)
{
    return PyModule_Create(&module);
}
