/*
 * Compiled kernels of the runtime gate: the myopic rule of one evaluate() call and of
 * evaluate_batch(), with the arithmetic of amv_calib/gate/_engine.py operation for operation.
 *
 * Both kernels are optional. When this module is not built, the pure-Python engine and the
 * numpy batch give the same decisions bit for bit (tests/test_ckernel.py checks both
 * against each other, and the Python engine is checked against closed forms and the seed's
 * TypeScript engine). Bit-identity needs IEEE double arithmetic evaluated as written: the
 * module is compiled with -ffp-contract=off (no fused multiply-add) and without fast-math;
 * every expression below keeps the Python source's order of operations.
 *
 * The module uses the C API and the buffer protocol only (no numpy headers), so importing
 * it pulls in nothing beyond the interpreter.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__FAST_MATH__)
#error "_ckernel must not be compiled with -ffast-math: the gate needs IEEE arithmetic"
#endif
/* doubles evaluated in double precision (not x87's extended one); otherwise the build
 * fails and the gate runs its Python code */
#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "_ckernel needs FLT_EVAL_METHOD == 0 to agree bit for bit with the Python engine"
#endif

static PyObject *s_theta, *s_kappa, *s_index, *s_ids, *s_rel, *s_cost, *s_id, *s_dict;
static PyObject *s_packed;
static PyObject *s_regime, *s_verifier, *s_voi, *s_v_stop, *s_r_expected, *s_h_harm;
static PyObject *s_probabilities, *s_reason, *s_planner_value, *s_vois;
static PyObject *s_PROCEED, *s_VERIFY, *s_ABSTAIN, *s_empty_tuple, *s_template;

/* -- one evaluate() call ------------------------------------------------------------------ */

/* Borrowed float of an attribute; 0 when absent or not exactly a float (the caller then
 * falls back to the Python engine, which handles or reports it). */
static int
float_attr(PyObject *obj, PyObject *name, double *out)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) {
        PyErr_Clear();
        return 0;
    }
    int ok = PyFloat_CheckExact(v);
    if (ok) {
        *out = PyFloat_AS_DOUBLE(v);
    }
    Py_DECREF(v);
    return ok;
}

typedef struct {
    double q, th, ka, lim, eps, r, s;
    const double *pp;
    const int *slot;
    int k;
    double e;
} expect_t;

/* E[V_stop] over the joint outcomes, depth first with confirm before refute: the order of
 * _engine._expect's lists, with the same prefix products (w from 1.0, f from q). */
static void
expect_rec(expect_t *x, int t, double w, double f)
{
    if (t == x->k) {
        double h = 1.0 - f;
        double rx = x->th * h;
        x->e += w * ((rx <= x->lim && h <= x->eps) ? rx : x->ka);
        return;
    }
    double p = x->pp[x->slot[t]];
    double r = x->r, s = x->s;
    double a = 1.0 - p;
    double pc = a * r + p * s;
    double pr = p * r + a * s;
    if (pc > 0.0) {
        expect_rec(x, t + 1, w * pc, f * (r / pc));
    }
    if (pr > 0.0) {
        expect_rec(x, t + 1, w * pr, f * (s / pr));
    }
}

/* c ? a : b without a branch (the conditions below are data-dependent and mispredict) */
static inline double
pick(int c, double a, double b)
{
    uint64_t ua, ub, mk = (uint64_t)0 - (uint64_t)(c != 0);
    memcpy(&ua, &a, sizeof ua);
    memcpy(&ub, &b, sizeof ub);
    uint64_t u = (ua & mk) | (ub & ~mk);
    double out;
    memcpy(&out, &u, sizeof out);
    return out;
}

/* E[V_stop] for a verifier of one premise, as Gate._decide unrolls it. An outcome of
 * probability 0 is skipped there; here its factor is divided by 1 instead (finite), and its
 * weight 0 then adds exactly +0 to E (E >= +0, and x + 0.0 == x), so the sum is the same. */
static inline double
expect_one(double p, double q, double r, double s, double th, double ka, double lim,
           double eps)
{
    double a = 1.0 - p;
    double pc = a * r + p * s;
    double pr = p * r + a * s;
    double dc = pick(pc > 0.0, pc, 1.0);
    double dr = pick(pr > 0.0, pr, 1.0);
    double hc = 1.0 - q * (r / dc);
    double rc = th * hc;
    double ec = pc * pick((rc <= lim) & (hc <= eps), rc, ka);
    double hr = 1.0 - q * (s / dr);
    double rr = th * hr;
    return ec + pr * pick((rr <= lim) & (hr <= eps), rr, ka);
}

/* Seed mode, one verifier whose first resolved premise (in premise order) is t: the
 * arithmetic of Gate._decide_seed. */
static double
seed_expect(const double *pp, const double *pre, Py_ssize_t m, Py_ssize_t t, double r,
            double th, double ka, double lim, double eps)
{
    double p = pp[t];
    double pc = (1.0 - p) * r + p * (1.0 - r);
    double pr = 1.0 - pc;
    double e = 0.0;
    double base = 1.0 - pre[t];
    if (pc != 0.0) {
        double acc = 1.0 - base * (1.0 - (p * (1.0 - r)) / pc);
        for (Py_ssize_t j = t + 1; j < m; j++) {
            acc = 1.0 - (1.0 - acc) * (1.0 - pp[j]);
        }
        double ra = acc * th;
        e = pc * ((ra <= lim && acc <= eps) ? ra : ka);
    }
    if (pr != 0.0) {
        double acc = 1.0 - base * (1.0 - (p * r) / pr);
        for (Py_ssize_t j = t + 1; j < m; j++) {
            acc = 1.0 - (1.0 - acc) * (1.0 - pp[j]);
        }
        double ra = acc * th;
        e = e + pr * ((ra <= lim && acc <= eps) ? ra : ka);
    }
    return e;
}

#define SMALL 16

/* The object's ``_packed`` bytes, ``n`` native doubles: the first two into ``a`` and ``b``,
 * the rest into ``rest``; 0 when it has none of that size (then read the attributes). The
 * model classes pack their numbers once, so a decision reads one object, not a float
 * object per number (most of a cold call's cache misses). */
static int
packed_doubles(PyObject *obj, Py_ssize_t n, double *a, double *b, double *rest)
{
    PyObject *packed = PyObject_GetAttr(obj, s_packed);
    if (packed == NULL) {
        PyErr_Clear();
        return 0;
    }
    int ok = PyBytes_CheckExact(packed)
        && PyBytes_GET_SIZE(packed) == (Py_ssize_t)sizeof(double) * n;
    if (ok) {
        const char *raw = PyBytes_AS_STRING(packed);
        memcpy(a, raw, sizeof(double));
        memcpy(b, raw + sizeof(double), sizeof(double));
        if (n > 2) {
            memcpy(rest, raw + 2 * sizeof(double), sizeof(double) * (size_t)(n - 2));
        }
    }
    Py_DECREF(packed);
    return ok;
}

/* ctx: (lam, delta, eps, voi_tolerance, Decision, R_PROCEED, R_PROCEED_NONE, R_ABSTAIN_R,
 *       R_ABSTAIN_H, R_ABSTAIN_NONE, R_VERIFY, seed)
 *
 * decide(ctx, action, probs, verifiers) -> Decision, or None where the Python engine must
 * decide instead (an unknown premise id, which it reports; a value that is not a float).
 * Mirrors Gate._decide (mode="amv", planner="myopic") and Gate._decide_seed (seed=True)
 * with no cost budget and at least one verification left. */
static PyObject *
ck_decide(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "decide(ctx, action, probs, verifiers)");
        return NULL;
    }
    PyObject *ctx = args[0], *action = args[1], *probs = args[2], *verifiers = args[3];
    if (!PyTuple_CheckExact(ctx) || PyTuple_GET_SIZE(ctx) != 12 || !PyTuple_CheckExact(probs)) {
        PyErr_SetString(PyExc_TypeError, "decide: ctx must be a 12-tuple, probs a tuple");
        return NULL;
    }
    double lam = PyFloat_AsDouble(PyTuple_GET_ITEM(ctx, 0));
    double delta = PyFloat_AsDouble(PyTuple_GET_ITEM(ctx, 1));
    double eps = PyFloat_AsDouble(PyTuple_GET_ITEM(ctx, 2));
    double voi_tol = PyFloat_AsDouble(PyTuple_GET_ITEM(ctx, 3));
    int seed = PyObject_IsTrue(PyTuple_GET_ITEM(ctx, 11));
    if (PyErr_Occurred() || seed < 0) {
        return NULL;
    }
    PyObject *decision_type = PyTuple_GET_ITEM(ctx, 4);
    if (!PyType_Check(decision_type)) {
        PyErr_SetString(PyExc_TypeError, "decide: ctx[4] must be the Decision class");
        return NULL;
    }
    Py_ssize_t m = PyTuple_GET_SIZE(probs);
    double pp_s[SMALL], pre_s[SMALL + 1];
    int slot_s[SMALL];
    double *pp = pp_s, *pre = pre_s;
    int *slot = slot_s;
    PyObject *seq = NULL, *index = NULL, *vois = NULL, *best_v = NULL, *reason = NULL;
    PyObject *dict = NULL, *result = NULL;
    if (m > SMALL) {
        pp = malloc(sizeof(double) * (size_t)m);
        pre = malloc(sizeof(double) * (size_t)(m + 1));
        slot = malloc(sizeof(int) * (size_t)m);
        if (pp == NULL || pre == NULL || slot == NULL) {
            PyErr_NoMemory();
            goto error;
        }
    }
    double theta, kappa;
    if (!packed_doubles(action, 2 + m, &theta, &kappa, pp)) {
        if (!float_attr(action, s_theta, &theta) || !float_attr(action, s_kappa, &kappa)) {
            goto fallback;
        }
        for (Py_ssize_t j = 0; j < m; j++) {
            PyObject *pj = PyTuple_GET_ITEM(probs, j);
            if (!PyFloat_CheckExact(pj)) {
                goto fallback;
            }
            pp[j] = PyFloat_AS_DOUBLE(pj);
        }
    }
    double lim = delta < kappa ? delta : kappa;
    double q = 1.0, h, rx;
    if (seed) {
        h = 0.0;
        pre[0] = 0.0;
        for (Py_ssize_t j = 0; j < m; j++) {
            h = 1.0 - (1.0 - h) * (1.0 - pp[j]);
            pre[j + 1] = h;
        }
        rx = h * theta;
    }
    else {
        for (Py_ssize_t j = 0; j < m; j++) {
            q *= 1.0 - pp[j];
        }
        h = 1.0 - q;
        rx = theta * h;
    }
    int adm = rx <= lim && h <= eps;
    double v_stop = adm ? rx : kappa;

    seq = PySequence_Fast(verifiers, "verifiers must be a sequence");
    if (seq == NULL) {
        goto error;
    }
    Py_ssize_t nv = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    index = PyObject_GetAttr(action, s_index);
    if (index == NULL || !PyDict_CheckExact(index)) {
        PyErr_Clear();
        goto fallback;
    }
    vois = PyTuple_New(nv);
    if (vois == NULL) {
        goto error;
    }
    double best = -INFINITY;
    for (Py_ssize_t n = 0; n < nv; n++) {
        PyObject *v = items[n];
        PyObject *ids = PyObject_GetAttr(v, s_ids);
        if (ids == NULL) {
            PyErr_Clear();
            goto fallback;
        }
        Py_ssize_t k = PyTuple_CheckExact(ids) ? PyTuple_GET_SIZE(ids) : -1;
        if (k < 0 || k > m) {
            Py_DECREF(ids);
            goto fallback; /* not a tuple, or some id unknown: the Python engine reports it */
        }
        int known = 1;
        for (Py_ssize_t t = 0; t < k && known; t++) {
            PyObject *pos = PyDict_GetItemWithError(index, PyTuple_GET_ITEM(ids, t));
            Py_ssize_t at = pos == NULL ? -1 : PyLong_AsSsize_t(pos);
            if (at < 0 || at >= m) {
                known = 0;
                break;
            }
            /* insertion sort: the premises in premise order, as Gate._indices gives them */
            Py_ssize_t u = t;
            while (u > 0 && slot[u - 1] > at) {
                slot[u] = slot[u - 1];
                u--;
            }
            slot[u] = (int)at;
        }
        Py_DECREF(ids);
        if (!known) {
            PyErr_Clear();
            goto fallback;
        }
        double r, cost;
        if (!packed_doubles(v, 2, &r, &cost, NULL)
                && (!float_attr(v, s_rel, &r) || !float_attr(v, s_cost, &cost))) {
            goto fallback;
        }
        double voi;
        if (seed) {
            voi = k == 0 ? -lam * cost
                         : (v_stop - seed_expect(pp, pre, m, slot[0], r, theta, kappa, lim,
                                                 eps)) - (lam * cost);
        }
        else if (k == 1) {
            double e = expect_one(pp[slot[0]], q, r, 1.0 - r, theta, kappa, lim, eps);
            voi = v_stop - e - lam * cost;
        }
        else {
            expect_t x = {q, theta, kappa, lim, eps, r, 1.0 - r, pp, slot, (int)k, 0.0};
            expect_rec(&x, 0, 1.0, q);
            voi = v_stop - x.e - lam * cost;
        }
        PyObject *fv = PyFloat_FromDouble(voi);
        if (fv == NULL) {
            goto error;
        }
        PyTuple_SET_ITEM(vois, n, fv);
        if (voi > best) {
            best = voi;
            best_v = v;
        }
    }

    PyObject *regime, *voi_obj;
    if (best_v == NULL) {
        regime = adm ? s_PROCEED : s_ABSTAIN;
        reason = PyTuple_GET_ITEM(ctx, adm ? 6 : 9);
        Py_INCREF(reason);
        voi_obj = Py_None;
        Py_INCREF(voi_obj);
    }
    else {
        if (seed ? best > 0.0 : best > voi_tol * (theta + kappa)) {
            regime = s_VERIFY;
            PyObject *vid = PyObject_GetAttr(best_v, s_id);
            if (vid == NULL) {
                goto error;
            }
            if (!PyUnicode_Check(vid)) {
                Py_DECREF(vid);
                goto fallback;
            }
            reason = PyUnicode_FromFormat("verifier %U %U", vid, PyTuple_GET_ITEM(ctx, 10));
            Py_DECREF(vid);
            if (reason == NULL) {
                goto error;
            }
        }
        else {
            regime = adm ? s_PROCEED : s_ABSTAIN;
            reason = PyTuple_GET_ITEM(ctx, adm ? 5 : (rx > lim ? 7 : 8));
            Py_INCREF(reason);
            best_v = NULL;
        }
        voi_obj = PyFloat_FromDouble(best);
        if (voi_obj == NULL) {
            goto error;
        }
    }
    /* a copy of a dict holding the ten keys: values are then replaced in place, where
     * inserting into a new dict would grow it twice */
    dict = PyDict_Copy(s_template);
    if (dict == NULL) {
        Py_DECREF(voi_obj);
        goto error;
    }
    {
        PyObject *vs = PyFloat_FromDouble(v_stop);
        PyObject *re = PyFloat_FromDouble(rx);
        PyObject *hh = PyFloat_FromDouble(h);
        int bad = vs == NULL || re == NULL || hh == NULL
            || PyDict_SetItem(dict, s_regime, regime) < 0
            || PyDict_SetItem(dict, s_verifier, best_v == NULL ? Py_None : best_v) < 0
            || PyDict_SetItem(dict, s_voi, voi_obj) < 0
            || PyDict_SetItem(dict, s_v_stop, vs) < 0
            || PyDict_SetItem(dict, s_r_expected, re) < 0
            || PyDict_SetItem(dict, s_h_harm, hh) < 0
            || PyDict_SetItem(dict, s_probabilities, probs) < 0
            || PyDict_SetItem(dict, s_reason, reason) < 0
            || PyDict_SetItem(dict, s_planner_value, Py_None) < 0
            || PyDict_SetItem(dict, s_vois, vois) < 0;
        Py_XDECREF(vs);
        Py_XDECREF(re);
        Py_XDECREF(hh);
        Py_DECREF(voi_obj);
        if (bad) {
            goto error;
        }
    }
    /* object.__new__(Decision), then object.__setattr__(d, "__dict__", dict): the frozen
     * dataclass's own __init__ costs more than the whole decision (see _engine._decision) */
    {
        PyTypeObject *tp = (PyTypeObject *)decision_type;
        result = tp->tp_new(tp, s_empty_tuple, NULL);
        if (result == NULL) {
            goto error;
        }
        if (PyObject_GenericSetAttr(result, s_dict, dict) < 0) {
            Py_CLEAR(result);
            goto error;
        }
    }
    goto cleanup;

fallback:
    result = Py_None;
    Py_INCREF(result);
    goto cleanup;

error:
    result = NULL;

cleanup:
    Py_XDECREF(dict);
    Py_XDECREF(reason);
    Py_XDECREF(vois);
    Py_XDECREF(index);
    Py_XDECREF(seq);
    if (pp != pp_s) {
        free(pp);
        free(pre);
        free(slot);
    }
    return result;
}

/* -- evaluate_batch() ------------------------------------------------------------------- */

typedef struct {
    Py_buffer view;
    int held;
} buf_t;

static int
get_buf(PyObject *obj, buf_t *b, Py_ssize_t nbytes, int writable, const char *name)
{
    b->held = 0;
    if (obj == Py_None) {
        return 0;
    }
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &b->view, flags) < 0) {
        return -1;
    }
    b->held = 1;
    if (b->view.len != nbytes) {
        PyErr_Format(PyExc_ValueError, "batch: %s holds %zd bytes, expected %zd", name,
                     b->view.len, nbytes);
        return -1;
    }
    return 0;
}

typedef struct {
    Py_ssize_t m, nv;
    double lam, delta, eps, voi_tol;
    const double *P, *TH, *KA, *COST, *REL;
    const char *RES, *AV;
    const Py_ssize_t *LEFT;
    double *Q, *H, *VS, *RE, *BEST;
    char *ADM;
    Py_ssize_t *IDX, *CH;
    signed char *REG;
} rows_t;

/* One row's outputs (``go``: VERIFY with verifier ``bi``). */
static inline void
store_row(const rows_t *c, Py_ssize_t row, double q, double h, double v_stop, double rx,
          int adm, double best, Py_ssize_t bi, int go)
{
    if (c->Q != NULL) {
        c->Q[row] = q;
    }
    c->H[row] = h;
    c->VS[row] = v_stop;
    c->RE[row] = rx;
    c->ADM[row] = (char)(adm != 0);
    c->BEST[row] = best;
    if (c->IDX != NULL) {
        c->IDX[row] = bi;
    }
    c->REG[row] = (signed char)(go ? 1 : (adm ? 0 : 2));
    c->CH[row] = go ? bi : -1;
}

#if defined(__GNUC__) || defined(__clang__)
#define AMV_PAIRS 1
/* Two rows at once in the lanes of a vector (SSE2 on x86-64, NEON on arm64, scalar code
 * elsewhere): every lane operation is the IEEE operation of the scalar code, so the lanes
 * hold exactly what two scalar passes would. */
typedef double v2d __attribute__((vector_size(16)));
typedef int64_t v2l __attribute__((vector_size(16)));

static inline v2d
vpick(v2l c, v2d a, v2d b)
{
    return (v2d)(((v2l)a & c) | ((v2l)b & ~c));
}


/* Whether rows i and i + 1 may verify and have every verifier available. */
static int
pair_ready(const rows_t *c, Py_ssize_t i)
{
    if (c->LEFT != NULL && (c->LEFT[i] <= 0 || c->LEFT[i + 1] <= 0)) {
        return 0;
    }
    if (c->AV != NULL) {
        for (Py_ssize_t v = 0; v < 2 * c->nv; v++) {
            if (!c->AV[i * c->nv + v]) {
                return 0;
            }
        }
    }
    return 1;
}

/* mode="amv" rows i and i + 1 when every available verifier of both resolves exactly one
 * premise, all are available and both rows may verify: 1 (outputs written), 0 (not that
 * case: nothing written), -1 (a value out of range). */
static int
pair_amv(const rows_t *c, Py_ssize_t i)
{
    const Py_ssize_t m = c->m, nv = c->nv, i1 = i + 1;
    if (!pair_ready(c, i)) {
        return 0;
    }
    const double *pa = c->P + i * m, *pb = c->P + i1 * m;
    v2d th = {c->TH[i], c->TH[i1]}, ka = {c->KA[i], c->KA[i1]};
    v2l ok = (th > 0.0) & (th < INFINITY) & (ka > 0.0) & (ka < INFINITY);
    v2d q = {1.0, 1.0};
    for (Py_ssize_t j = 0; j < m; j++) {
        v2d p = {pa[j], pb[j]};
        ok &= (p >= 0.0) & (p <= 1.0);
        q *= 1.0 - p;
    }
    const v2d one = {1.0, 1.0};
    v2d dl = {c->delta, c->delta};
    v2d lim = vpick(dl < ka, dl, ka);
    v2d h = 1.0 - q;
    v2d rx = th * h;
    v2l adm = (rx <= lim) & (h <= c->eps);
    v2d v_stop = vpick(adm, rx, ka);
    v2d best = {-INFINITY, -INFINITY};
    v2l bi = {0, 0};
    for (Py_ssize_t v = 0; v < nv; v++) {
        const char *ra = c->RES + (i * nv + v) * m, *rb = c->RES + (i1 * nv + v) * m;
        Py_ssize_t na = 0, nb = 0, ja = 0, jb = 0;
        for (Py_ssize_t j = 0; j < m; j++) {
            Py_ssize_t x = ra[j] != 0, y = rb[j] != 0;
            na += x;
            nb += y;
            ja += x * j;
            jb += y * j;
        }
        if (na != 1 || nb != 1) {
            return 0;
        }
        Py_ssize_t iva = i * nv + v, ivb = i1 * nv + v;
        v2d r = {c->REL[iva], c->REL[ivb]}, cost = {c->COST[iva], c->COST[ivb]};
        ok &= (cost >= 0.0) & (cost < INFINITY) & (r > 0.5) & (r <= 1.0);
        /* expect_one() in two lanes */
        v2d p = {pa[ja], pb[jb]};
        v2d s = 1.0 - r;
        v2d a = 1.0 - p;
        v2d pc = a * r + p * s;
        v2d pr = p * r + a * s;
        v2d dc = vpick(pc > 0.0, pc, one);
        v2d dr = vpick(pr > 0.0, pr, one);
        v2d hc = 1.0 - q * (r / dc);
        v2d rc = th * hc;
        v2d ec = pc * vpick((rc <= lim) & (hc <= c->eps), rc, ka);
        v2d hr = 1.0 - q * (s / dr);
        v2d rr = th * hr;
        v2d e = ec + pr * vpick((rr <= lim) & (hr <= c->eps), rr, ka);
        v2d voi = v_stop - e - c->lam * cost;
        v2l better = voi > best;
        best = vpick(better, voi, best);
        v2l vv = {v, v};
        bi = (better & vv) | (~better & bi);
    }
    if (!(ok[0] && ok[1])) {
        return -1;
    }
    v2l go = best > c->voi_tol * (th + ka);
    for (int l = 0; l < 2; l++) {
        store_row(c, i + l, q[l], h[l], v_stop[l], rx[l], adm[l] != 0, best[l], bi[l],
                  go[l] != 0);
    }
    return 1;
}

/* mode="seed" rows i and i + 1 when every verifier of both resolves some premise, all are
 * available and both rows may verify; returns as pair_amv(). The lanes follow
 * Gate._decide_seed: the seed's P_any accumulation, re-run after the first resolved premise
 * t of each lane (steps j <= t leave a lane unchanged). */
static int
pair_seed(const rows_t *c, Py_ssize_t i)
{
    const Py_ssize_t m = c->m, nv = c->nv, i1 = i + 1;
    if (m > SMALL || !pair_ready(c, i)) {
        return 0;
    }
    const double *pa = c->P + i * m, *pb = c->P + i1 * m;
    v2d th = {c->TH[i], c->TH[i1]}, ka = {c->KA[i], c->KA[i1]};
    v2l ok = (th > 0.0) & (th < INFINITY) & (ka > 0.0) & (ka < INFINITY);
    v2d pre[SMALL + 1];
    v2d h = {0.0, 0.0};
    pre[0] = h;
    for (Py_ssize_t j = 0; j < m; j++) {
        v2d p = {pa[j], pb[j]};
        ok &= (p >= 0.0) & (p <= 1.0);
        h = 1.0 - (1.0 - h) * (1.0 - p);
        pre[j + 1] = h;
    }
    v2d dl = {c->delta, c->delta};
    v2d lim = vpick(dl < ka, dl, ka);
    v2d rx = h * th;
    v2l adm = (rx <= lim) & (h <= c->eps);
    v2d v_stop = vpick(adm, rx, ka);
    v2d best = {-INFINITY, -INFINITY};
    v2l bi = {0, 0};
    for (Py_ssize_t v = 0; v < nv; v++) {
        const char *ra = c->RES + (i * nv + v) * m, *rb = c->RES + (i1 * nv + v) * m;
        Py_ssize_t ta = -1, tb = -1;
        for (Py_ssize_t j = m - 1; j >= 0; j--) {
            ta = ra[j] ? j : ta;
            tb = rb[j] ? j : tb;
        }
        if (ta < 0 || tb < 0) {
            return 0;
        }
        Py_ssize_t iva = i * nv + v, ivb = i1 * nv + v;
        v2d r = {c->REL[iva], c->REL[ivb]}, cost = {c->COST[iva], c->COST[ivb]};
        ok &= (cost >= 0.0) & (cost < INFINITY) & (r > 0.5) & (r <= 1.0);
        v2d p = {pa[ta], pb[tb]};
        v2d base = 1.0 - (v2d){pre[ta][0], pre[tb][1]};
        v2d pc = (1.0 - p) * r + p * (1.0 - r);
        v2d pr = 1.0 - pc;
        /* an outcome of probability 0 is left out of E; here its posterior is divided by 1
         * instead (finite), and weight 0 adds exactly +0 (E >= +0) */
        const v2d one = {1.0, 1.0};
        v2d dc = vpick(pc != 0.0, pc, one), dr = vpick(pr != 0.0, pr, one);
        v2d acc_c = 1.0 - base * (1.0 - (p * (1.0 - r)) / dc);
        v2d acc_r = 1.0 - base * (1.0 - (p * r) / dr);
        v2l tt = {ta, tb};
        for (Py_ssize_t j = 0; j < m; j++) {
            v2d q = {pa[j], pb[j]};
            v2l later = tt < (v2l){j, j};
            acc_c = vpick(later, 1.0 - (1.0 - acc_c) * (1.0 - q), acc_c);
            acc_r = vpick(later, 1.0 - (1.0 - acc_r) * (1.0 - q), acc_r);
        }
        v2d ra_c = acc_c * th, ra_r = acc_r * th;
        v2d e = pc * vpick((ra_c <= lim) & (acc_c <= c->eps), ra_c, ka);
        e = e + pr * vpick((ra_r <= lim) & (acc_r <= c->eps), ra_r, ka);
        v2d voi = (v_stop - e) - (c->lam * cost);
        v2l better = voi > best;
        best = vpick(better, voi, best);
        v2l vv = {v, v};
        bi = (better & vv) | (~better & bi);
    }
    if (!(ok[0] && ok[1])) {
        return -1;
    }
    v2l go = best > 0.0;
    for (int l = 0; l < 2; l++) {
        store_row(c, i + l, 1.0, h[l], v_stop[l], rx[l], adm[l] != 0, best[l], bi[l],
                  go[l] != 0);
    }
    return 1;
}
#else
#define AMV_PAIRS 0
#endif

#define N_BUFS 17

/* batch(seed, lam, delta, eps, voi_tolerance, n, m, V,
 *       p, mask|None, theta, kappa, resolves, cost, rel, avail|None, left|None,
 *       q_out|None, h_out, v_stop_out, r_exp_out, adm_out, best_out, idx_out|None,
 *       regime_out, chosen_out) -> 0, or 1 when some input is out of range
 *
 * Arrays are C-contiguous: float64 (p, theta, kappa, cost, rel, outputs), bool (mask,
 * resolves, avail, adm_out), intp (left, idx_out, chosen_out), int8 (regime_out). Rows whose
 * ``left`` is <= 0 never verify. Values are checked as the numpy batch checks them (p in
 * [0, 1] where masked in, theta and kappa > 0 and finite, cost >= 0 and finite and
 * reliability in (0.5, 1] where available); on the first failure the kernel stops and
 * returns 1 so that the caller can name the bad entry. */
static PyObject *
ck_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 26) {
        PyErr_SetString(PyExc_TypeError, "batch() takes 26 arguments");
        return NULL;
    }
    int seed = PyObject_IsTrue(args[0]);
    double lam = PyFloat_AsDouble(args[1]);
    double delta = PyFloat_AsDouble(args[2]);
    double eps = PyFloat_AsDouble(args[3]);
    double voi_tol = PyFloat_AsDouble(args[4]);
    Py_ssize_t n = PyLong_AsSsize_t(args[5]);
    Py_ssize_t m = PyLong_AsSsize_t(args[6]);
    Py_ssize_t nv = PyLong_AsSsize_t(args[7]);
    if (seed < 0 || PyErr_Occurred()) {
        return NULL;
    }
    if (n < 0 || m < 0 || nv < 0 || m > 4096) {
        PyErr_SetString(PyExc_ValueError, "batch: bad shape");
        return NULL;
    }
    const Py_ssize_t D = sizeof(double), B = 1, I = sizeof(Py_ssize_t);
    const Py_ssize_t sizes[N_BUFS] = {
        n * m * D, n * m * B, n * D, n * D, n * nv * m * B, n * nv * D, n * nv * D,
        n * nv * B, n * I,
        n * D, n * D, n * D, n * D, n * B, n * D, n * I, n * B,
    };
    static const char *names[N_BUFS] = {
        "p", "premise_mask", "theta", "kappa", "resolves", "cost", "reliability",
        "available", "budget", "q", "h", "v_stop", "r_expected", "admissible", "voi", "idx",
        "regime",
    };
    buf_t bufs[N_BUFS + 1];
    memset(bufs, 0, sizeof(bufs));
    PyObject *ret = NULL;
    double *pp = NULL, *pre = NULL;
    int *slot = NULL;
    for (int b = 0; b < N_BUFS; b++) {
        if (get_buf(args[8 + b], &bufs[b], sizes[b], b >= 9, names[b]) < 0) {
            goto done;
        }
    }
    if (get_buf(args[25], &bufs[N_BUFS], n * I, 1, "chosen") < 0) {
        goto done;
    }
    for (int b = 0; b <= N_BUFS; b++) {
        /* required: everything but mask, avail, left, q_out and idx_out */
        if (!bufs[b].held && b != 1 && b != 7 && b != 8 && b != 9 && b != 15) {
            PyErr_Format(PyExc_TypeError, "batch: %s must be an array",
                         b < N_BUFS ? names[b] : "chosen");
            goto done;
        }
    }
    const double *P = bufs[0].view.buf;
    const char *MASK = bufs[1].held ? bufs[1].view.buf : NULL;
    const double *TH = bufs[2].view.buf, *KA = bufs[3].view.buf;
    const char *RES = bufs[4].view.buf;
    const double *COST = bufs[5].view.buf, *REL = bufs[6].view.buf;
    const char *AV = bufs[7].held ? bufs[7].view.buf : NULL;
    const Py_ssize_t *LEFT = bufs[8].held ? bufs[8].view.buf : NULL;
    double *Q = bufs[9].held ? bufs[9].view.buf : NULL;
    double *H = bufs[10].view.buf, *VS = bufs[11].view.buf, *RE = bufs[12].view.buf;
    char *ADM = bufs[13].view.buf;
    double *BEST = bufs[14].view.buf;
    Py_ssize_t *IDX = bufs[15].held ? bufs[15].view.buf : NULL;
    signed char *REG = bufs[16].view.buf;
    Py_ssize_t *CH = bufs[N_BUFS].view.buf;

    pp = malloc(sizeof(double) * (size_t)(m + 1));
    pre = malloc(sizeof(double) * (size_t)(m + 2));
    slot = malloc(sizeof(int) * (size_t)(m + 1));
    if (pp == NULL || pre == NULL || slot == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    long invalid = 0;
    const rows_t pc_ctx = {m, nv, lam, delta, eps, voi_tol, P, TH, KA, COST, REL, RES, AV,
                           LEFT, Q, H, VS, RE, BEST, ADM, IDX, CH, REG};
#if AMV_PAIRS
    const int pairs = MASK == NULL;
    int (*pair)(const rows_t *, Py_ssize_t) = seed ? pair_seed : pair_amv;
#endif
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && !invalid; i++) {
#if AMV_PAIRS
        if (pairs && i + 1 < n) {
            int got = pair(&pc_ctx, i);
            if (got < 0) {
                invalid = 1;
                break;
            }
            if (got > 0) {
                i++;
                continue;
            }
        }
#endif
        const double *pi = P + i * m;
        const char *mi = MASK ? MASK + i * m : NULL;
        double th = TH[i], ka = KA[i];
        if (!(th > 0.0 && th < INFINITY) || !(ka > 0.0 && ka < INFINITY)) {
            invalid = 1;
            break;
        }
        /* the row's real premises, in order (in place when there is no padding) */
        const double *pr_ = pi;
        int cnt = (int)m, bad = 0;
        if (mi != NULL) {
            cnt = 0;
            for (Py_ssize_t j = 0; j < m; j++) {
                pp[cnt] = pi[j];
                cnt += mi[j] != 0;
            }
            pr_ = pp;
        }
        for (int c = 0; c < cnt; c++) {
            bad |= !(pr_[c] >= 0.0) | !(pr_[c] <= 1.0);
        }
        if (bad) {
            invalid = 1;
            break;
        }
        double q = 1.0, h;
        if (seed) {
            h = 0.0;
            pre[0] = 0.0;
            for (int c = 0; c < cnt; c++) {
                h = 1.0 - (1.0 - h) * (1.0 - pr_[c]);
                pre[c + 1] = h;
            }
        }
        else {
            for (int c = 0; c < cnt; c++) {
                q *= 1.0 - pr_[c];
            }
            h = 1.0 - q;
        }
        double lim = delta < ka ? delta : ka;
        double rx = th * h;
        int adm = rx <= lim && h <= eps;
        double v_stop = adm ? rx : ka;
        int may = LEFT == NULL || LEFT[i] > 0;
        double best = -INFINITY;
        Py_ssize_t bi = 0;
        for (Py_ssize_t v = 0; v < nv; v++) {
            Py_ssize_t iv = i * nv + v;
            if (AV != NULL && !AV[iv]) {
                continue;
            }
            double r = REL[iv], cost = COST[iv];
            bad |= !(cost >= 0.0) | !(cost < INFINITY) | !(r > 0.5) | !(r <= 1.0);
            if (!may) {
                continue;
            }
            /* the verifier's premises as positions among the row's real premises;
             * slot[k] = c, k += resolved: no branch on which premise it is */
            const char *rv = RES + iv * m;
            int k = 0;
            if (mi == NULL) {
                for (Py_ssize_t j = 0; j < m; j++) {
                    slot[k] = (int)j;
                    k += rv[j] != 0;
                }
            }
            else {
                int c = 0;
                for (Py_ssize_t j = 0; j < m; j++) {
                    int real = mi[j] != 0;
                    slot[k] = c;
                    k += real & (rv[j] != 0);
                    c += real;
                }
            }
            double voi;
            if (seed) {
                if (k == 0) {
                    voi = -lam * cost;
                }
                else {
                    /* Gate._decide_seed: the first resolved premise only */
                    double e = seed_expect(pr_, pre, cnt, slot[0], r, th, ka, lim, eps);
                    voi = (v_stop - e) - (lam * cost);
                }
            }
            else if (k == 1) {
                double e = expect_one(pr_[slot[0]], q, r, 1.0 - r, th, ka, lim, eps);
                voi = v_stop - e - lam * cost;
            }
            else {
                expect_t x = {q, th, ka, lim, eps, r, 1.0 - r, pr_, slot, k, 0.0};
                expect_rec(&x, 0, 1.0, q);
                voi = v_stop - x.e - lam * cost;
            }
            /* the first largest VOI, as the strict scan of Gate._decide */
            int better = voi > best;
            best = pick(better, voi, best);
            bi = better ? v : bi;
        }
        if (bad) {
            invalid = 1;
            break;
        }
        int go = seed ? best > 0.0 : best > voi_tol * (th + ka);
        store_row(&pc_ctx, i, q, h, v_stop, rx, adm, best, bi, go);
    }
    Py_END_ALLOW_THREADS
    ret = PyLong_FromLong(invalid);
done:
    free(pp);
    free(pre);
    free(slot);
    for (int b = 0; b <= N_BUFS; b++) {
        if (bufs[b].held) {
            PyBuffer_Release(&bufs[b].view);
        }
    }
    return ret;
}

static PyMethodDef ck_methods[] = {
    {"decide", (PyCFunction)(void (*)(void))ck_decide, METH_FASTCALL,
     "decide(ctx, action, probs, verifiers) -> Decision or None"},
    {"batch", (PyCFunction)(void (*)(void))ck_batch, METH_FASTCALL,
     "batch(...) -> 0, or 1 when an input is out of range"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef ck_module = {
    PyModuleDef_HEAD_INIT, "_ckernel",
    "Compiled kernels of the gate's myopic rule (see _ckernel.c).", -1, ck_methods,
    NULL, NULL, NULL, NULL,
};

#define INTERN(var, text)                                \
    do {                                                 \
        if ((var = PyUnicode_InternFromString(text)) == NULL) \
            return NULL;                                 \
    } while (0)

PyMODINIT_FUNC
PyInit__ckernel(void)
{
    INTERN(s_theta, "impact_cost_theta");
    INTERN(s_kappa, "abstention_cost_kappa");
    INTERN(s_index, "_index");
    INTERN(s_ids, "resolves_premise_ids");
    INTERN(s_rel, "symmetric_reliability");
    INTERN(s_cost, "execution_cost");
    INTERN(s_id, "id");
    INTERN(s_dict, "__dict__");
    INTERN(s_packed, "_packed");
    INTERN(s_regime, "regime");
    INTERN(s_verifier, "verifier");
    INTERN(s_voi, "voi");
    INTERN(s_v_stop, "v_stop");
    INTERN(s_r_expected, "r_expected");
    INTERN(s_h_harm, "h_harm");
    INTERN(s_probabilities, "probabilities");
    INTERN(s_reason, "reason");
    INTERN(s_planner_value, "planner_value");
    INTERN(s_vois, "vois");
    INTERN(s_PROCEED, "PROCEED");
    INTERN(s_VERIFY, "VERIFY");
    INTERN(s_ABSTAIN, "ABSTAIN");
    if ((s_empty_tuple = PyTuple_New(0)) == NULL || (s_template = PyDict_New()) == NULL) {
        return NULL;
    }
    PyObject *keys[] = {s_regime, s_verifier, s_voi, s_v_stop, s_r_expected, s_h_harm,
                        s_probabilities, s_reason, s_planner_value, s_vois};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        if (PyDict_SetItem(s_template, keys[k], Py_None) < 0) {
            return NULL;
        }
    }
    return PyModule_Create(&ck_module);
}
