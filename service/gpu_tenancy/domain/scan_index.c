/* The capacity index of one GPU model as plain integer arrays, answered by scanning.
 *
 * Each host's free GPUs are a step function from the origin (times[i] where segment i
 * starts, vals[i] its value; the last segment runs forever), kept as StepProfile keeps
 * them (profile.py: same breakpoints, equal neighbours merged). A question is answered
 * the way the planner's reference answers it (bench/naive_planner.py): the earliest
 * start at or after t at which the VMs fit for d seconds, then among the hosts that fit
 * then the least (free at the start, name). Hosts are held in name order.
 *
 * Why: the Python index (capacity.py) keeps runs per GPU count in heaps so that a
 * question does not read every host. On the few tens of hosts a cloud region (and the
 * trace replay) has, upkeeping those runs costs more than reading every profile in C
 * does: no tuples, no sets, no heaps, and a reservation is an insert into two arrays.
 * scan_index.py wraps it with ModelIndex's interface; plan_run.py picks one or the other.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef long long i64;
#define FOREVER ((i64)1 << 62)   /* profile.INF */
#define MOST_GPUS ((i64)1 << 20)  /* bounds on GPU counts, so that no sum of them overflows */

/* Times and durations in [0, FOREVER], GPU counts within +-MOST_GPUS: what the planner passes
 * (epoch seconds, durations the API bounds), and what keeps every sum and difference below
 * in range (signed overflow is undefined in C; -1 can mean "none" as no start is negative). */
static int in_range(i64 x, i64 lo, i64 hi, const char *what) {
    if (x >= lo && x <= hi) return 0;
    PyErr_Format(PyExc_ValueError, "%s out of range: %lld", what, (long long)x);
    return -1;
}

typedef struct {
    i64 *times;
    i64 *vals;
    Py_ssize_t n, cap;
    i64 gpus;
} Profile;

/* Start bounds: for one VM of g GPUs (g <= BOUND_LEVELS) and a duration class c, each host's
 * earliest start from the origin at which g GPUs are free for dlo(c) seconds, the least
 * duration of the class (-1: never; UNKNOWN: not worked out since the host last changed).
 * A lease of d >= dlo(c) seconds cannot start on that host before it, so a question skips
 * every host whose bound lies past the best start found so far, and reads the others from
 * their bound: on many hosts most are skipped at one comparison each. */
#define BOUND_LEVELS 64
#define CLASSES 24
#define UNKNOWN (-2)

typedef struct {
    PyObject_HEAD
    Py_ssize_t nhosts;
    Profile *hosts;
    i64 origin;
    i64 *bounds[BOUND_LEVELS + 1];   /* by GPU count: CLASSES rows of nhosts (a question reads one row
                                        through), made at its first question */
    int levels[BOUND_LEVELS];        /* the GPU counts made, in order made */
    int nlevels;
    i64 largest_now;                 /* largest_free_now's answer, -1: not since a reservation at the origin */
} ScanObject;

/* the class of a duration d >= 1: [1, 64) is class 0, then one class per power of two */
static int class_of(i64 d) {
    int c = 0;
    while (c < CLASSES - 1 && (d >> (c + 6)) != 0) c++;
    return c;
}

static i64 class_least(int c) {
    return c == 0 ? 1 : (i64)1 << (c + 5);
}

/* index of the segment holding t: the last i with times[i] <= t (t >= times[0]) */
static Py_ssize_t segment_at(const Profile *p, i64 t) {
    Py_ssize_t lo = 0, hi = p->n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (p->times[mid] <= t) lo = mid + 1; else hi = mid;
    }
    return lo - 1;
}

static int grow(Profile *p, Py_ssize_t more) {
    if (p->n + more <= p->cap) return 0;
    Py_ssize_t cap = p->cap ? p->cap : 4;
    while (cap < p->n + more) cap *= 2;
    i64 *t = PyMem_Realloc(p->times, cap * sizeof(i64));
    if (!t) { PyErr_NoMemory(); return -1; }
    p->times = t;
    i64 *v = PyMem_Realloc(p->vals, cap * sizeof(i64));
    if (!v) { PyErr_NoMemory(); return -1; }
    p->vals = v;
    p->cap = cap;
    return 0;
}

static void insert_at(Profile *p, Py_ssize_t i, i64 t, i64 v) {
    memmove(p->times + i + 1, p->times + i, (p->n - i) * sizeof(i64));
    memmove(p->vals + i + 1, p->vals + i, (p->n - i) * sizeof(i64));
    p->times[i] = t;
    p->vals[i] = v;
    p->n++;
}

static void delete_at(Profile *p, Py_ssize_t i) {
    memmove(p->times + i, p->times + i + 1, (p->n - i - 1) * sizeof(i64));
    memmove(p->vals + i, p->vals + i + 1, (p->n - i - 1) * sizeof(i64));
    p->n--;
}

/* StepProfile.add: delta on [start, end), clipped to the origin, equal neighbours merged */
static int profile_add(Profile *p, i64 start, i64 end, i64 delta) {
    if (start < p->times[0]) start = p->times[0];
    if (end <= start || delta == 0) return 0;
    if (grow(p, 2) < 0) return -1;
    Py_ssize_t i = segment_at(p, start), j;
    if (p->times[i] != start) {
        i++;
        insert_at(p, i, start, p->vals[i - 1]);
    }
    if (end >= FOREVER) {
        j = p->n;
    } else {
        j = segment_at(p, end);
        if (p->times[j] != end) {
            j++;
            insert_at(p, j, end, p->vals[j - 1]);
        }
    }
    for (Py_ssize_t k = i; k < j; k++) p->vals[k] += delta;
    if (j < p->n && p->vals[j] == p->vals[j - 1]) delete_at(p, j);
    if (i > 0 && p->vals[i] == p->vals[i - 1]) delete_at(p, i);
    return 0;
}

static void free_profiles(Profile *hosts, Py_ssize_t n);

static void Scan_dealloc(ScanObject *self) {
    free_profiles(self->hosts, self->nhosts);
    for (int i = 0; i < self->nlevels; i++) PyMem_Free(self->bounds[self->levels[i]]);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

typedef struct {
    i64 t, delta;
} Change;

static int by_time(const void *a, const void *b) {
    i64 x = ((const Change *)a)->t, y = ((const Change *)b)->t;
    return (x > y) - (x < y);
}

/* StepProfile.of_spans: the host's gpus, plus delta on each (start, end, delta), built at once */
static int profile_of_spans(Profile *p, i64 origin, PyObject *spans) {
    PyObject *seq = PySequence_Tuple(spans);   /* a copy: nothing the caller runs meanwhile changes it */
    if (!seq) return -1;
    Py_ssize_t m = PyTuple_GET_SIZE(seq), k = 0;
    Change *ch = PyMem_Malloc((2 * m + 1) * sizeof(Change));
    if (!ch) { Py_DECREF(seq); PyErr_NoMemory(); return -1; }
    i64 first = p->gpus;   /* spans that start by the origin go straight into its value */
    for (Py_ssize_t i = 0; i < m; i++) {
        long long a, b, d;
        PyObject *span = PyTuple_GET_ITEM(seq, i);
        if (!PyTuple_Check(span)) {
            PyErr_SetString(PyExc_TypeError, "a hold must be a tuple (start, end, delta)");
            goto fail;
        }
        if (!PyArg_ParseTuple(span, "LLL", &a, &b, &d) || in_range(a, -FOREVER, FOREVER, "a hold's start") < 0 ||
            in_range(b, -FOREVER, FOREVER, "a hold's end") < 0 || in_range(d, -MOST_GPUS, MOST_GPUS, "a hold's GPUs") < 0)
            goto fail;
        if (a <= origin) {
            if (b <= origin || d == 0) continue;
            first += d;
        } else {
            if (b <= a || d == 0) continue;
            ch[k].t = a;
            ch[k++].delta = d;
        }
        if (b < FOREVER) {
            ch[k].t = b;
            ch[k++].delta = -d;
        }
    }
    Py_DECREF(seq);
    seq = NULL;
    qsort(ch, k, sizeof(Change), by_time);
    if (grow(p, k + 1) < 0) goto fail;
    p->times[0] = origin;
    p->vals[0] = first;
    p->n = 1;
    i64 v = first;
    for (Py_ssize_t i = 0; i < k;) {
        i64 t = ch[i].t, sum = 0;
        for (; i < k && ch[i].t == t; i++) sum += ch[i].delta;
        if (sum) {   /* equal neighbours merged, as add() leaves them */
            v += sum;
            p->times[p->n] = t;
            p->vals[p->n++] = v;
        }
    }
    PyMem_Free(ch);
    return 0;
fail:
    Py_XDECREF(seq);
    PyMem_Free(ch);
    return -1;
}

/* Scan(origin, [(gpus, holds), ...]): the hosts in name order, each with its holds as
 * (start, end, -gpus) */
static void free_profiles(Profile *hosts, Py_ssize_t n) {
    for (Py_ssize_t h = 0; h < n; h++) {
        PyMem_Free(hosts[h].times);
        PyMem_Free(hosts[h].vals);
    }
    PyMem_Free(hosts);
}

/* Scan(origin, [(gpus, holds), ...]): the hosts in name order, each with its holds as
 * (start, end, -gpus). Built aside and kept only whole: a failed __init__ leaves no hosts. */
static int Scan_init(ScanObject *self, PyObject *args, PyObject *Py_UNUSED(kw)) {
    long long origin;
    PyObject *list;
    if (!PyArg_ParseTuple(args, "LO!", &origin, &PyList_Type, &list) ||
        in_range(origin, 0, FOREVER, "the origin") < 0) return -1;
    if (self->hosts) {
        PyErr_SetString(PyExc_TypeError, "a Scan is made once");
        return -1;
    }
    PyObject *items = PyList_AsTuple(list);   /* a copy, as for the holds */
    if (!items) return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    Profile *hosts = PyMem_Calloc(n ? n : 1, sizeof(Profile));
    if (!hosts) { Py_DECREF(items); PyErr_NoMemory(); return -1; }
    for (Py_ssize_t h = 0; h < n; h++) {
        long long gpus;
        PyObject *spans;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(items, h), "LO", &gpus, &spans) ||
            in_range(gpus, 0, MOST_GPUS, "a host's GPUs") < 0) goto fail;
        hosts[h].gpus = gpus;
        if (profile_of_spans(&hosts[h], origin, spans) < 0) goto fail;
    }
    Py_DECREF(items);
    for (int i = 0; i < self->nlevels; i++) {   /* made for no hosts, by a question after a failed build */
        PyMem_Free(self->bounds[self->levels[i]]);
        self->bounds[self->levels[i]] = NULL;
    }
    self->nlevels = 0;
    self->largest_now = -1;
    self->origin = origin;
    self->hosts = hosts;
    self->nhosts = n;
    return 0;
fail:
    Py_DECREF(items);
    free_profiles(hosts, n);
    return -1;
}

static int host_arg(ScanObject *self, Py_ssize_t h) {
    if (h < 0 || h >= self->nhosts) {
        PyErr_SetString(PyExc_IndexError, "no such host");
        return -1;
    }
    return 0;
}

/* After host h lost `gpus` over [start, end): a bound whose window [b, b + dlo) lies outside
 * that span still holds (no GPUs were freed anywhere, so nothing fits earlier, and its window
 * is untouched); the others are worked out again when next asked. GPUs given back (gpus < 0)
 * can move any bound earlier: all of the host's are. */
static void forget_bounds(ScanObject *self, Py_ssize_t h, i64 start, i64 end, i64 gpus) {
    if (gpus == 0 || end <= start) return;
    for (int i = 0; i < self->nlevels; i++) {
        i64 *b = self->bounds[self->levels[i]] + h;
        for (int c = 0; c < CLASSES; c++) {
            i64 *slot = b + c * self->nhosts;
            if (*slot == UNKNOWN || (gpus > 0 && (*slot < 0 || *slot + class_least(c) <= start || *slot >= end)))
                continue;
            *slot = UNKNOWN;
        }
    }
}

/* the bounds of g GPUs (1 <= g <= BOUND_LEVELS), made all UNKNOWN at the first question of g */
static i64 *bounds_of(ScanObject *self, i64 g) {
    if (self->bounds[g]) return self->bounds[g];
    Py_ssize_t n = self->nhosts * CLASSES;
    i64 *b = PyMem_Malloc((n ? n : 1) * sizeof(i64));
    if (!b) { PyErr_NoMemory(); return NULL; }
    for (Py_ssize_t i = 0; i < n; i++) b[i] = UNKNOWN;
    self->bounds[g] = b;
    self->levels[self->nlevels++] = (int)g;
    return b;
}

/* reserve(host, start, end, gpus): take gpus over [start, end) */
static PyObject *Scan_reserve(ScanObject *self, PyObject *args) {
    Py_ssize_t h;
    long long start, end, gpus;
    if (!PyArg_ParseTuple(args, "nLLL", &h, &start, &end, &gpus) || host_arg(self, h) < 0 ||
        in_range(start, -FOREVER, FOREVER, "start") < 0 || in_range(end, -FOREVER, FOREVER, "end") < 0 ||
        in_range(gpus, -MOST_GPUS, MOST_GPUS, "gpus") < 0) return NULL;
    if (profile_add(&self->hosts[h], start, end, -gpus) < 0) return NULL;
    forget_bounds(self, h, start, end, gpus);
    if (start <= self->origin && end > self->origin) self->largest_now = -1;
    Py_RETURN_NONE;
}

/* The earliest start >= t on host p at which it has >= g free all over [start, start+d);
 * -1 when there is none at or before `until`. *seg: the segment holding that start. */
static i64 host_earliest(const Profile *p, i64 t, i64 d, i64 g, i64 until, Py_ssize_t *seg) {
    Py_ssize_t k = segment_at(p, t), n = p->n, first = k;
    i64 cand = t;
    while (k < n) {
        if (cand > until) return -1;
        i64 seg_end = k + 1 < n ? p->times[k + 1] : FOREVER;
        if (p->vals[k] < g) {
            if (k + 1 >= n) return -1;
            cand = seg_end;
            first = k + 1;
        } else if (seg_end - cand >= d) {
            *seg = first;
            return cand;
        }
        k++;
    }
    return -1;
}

/* host h's bound for g GPUs and class c (see ScanObject), worked out if unknown; a host of
 * fewer than g GPUs never takes the VM */
static i64 host_bound(ScanObject *self, i64 *row, Py_ssize_t h, i64 g, int c) {
    i64 *slot = row + h;
    if (*slot == UNKNOWN && self->hosts[h].gpus < g) {
        *slot = -1;
    } else if (*slot == UNKNOWN) {
        const Profile *p = &self->hosts[h];
        Py_ssize_t seg, k = p->n - 1;
        i64 s = host_earliest(p, self->origin, class_least(c), g, FOREVER, &seg);
        if (s < 0 && p->vals[k] >= g) {   /* earliest_gang cuts a window at FOREVER: its last run fits */
            while (k > 0 && p->vals[k - 1] >= g) k--;
            s = p->times[k];
        }
        *slot = s;
    }
    return *slot;
}

/* the free GPUs of p once a lease of d seconds from s has ended, within [0, gpus]: what the
 * host's other holds keep of it after the lease (the key of hosts that empty together) */
static i64 free_after(const Profile *p, i64 s, i64 d) {
    i64 v = p->vals[d >= FOREVER - s ? p->n - 1 : segment_at(p, s + d)];
    return v < 0 ? 0 : (v > p->gpus ? p->gpus : v);
}

/* earliest_one(t, d, g[, by_end]) -> (start, host) or None: one VM of g GPUs for d seconds;
 * among the hosts where it starts earliest the least (free at the start, name), or with by_end
 * the least (free once it ends, free at the start, name): hosts empty together */
static PyObject *Scan_earliest_one(ScanObject *self, PyObject *args) {
    long long t, d, g;
    int by_end = 0;
    if (!PyArg_ParseTuple(args, "LLL|p", &t, &d, &g, &by_end) || in_range(t, -FOREVER, FOREVER, "t") < 0 ||
        in_range(d, 0, FOREVER, "d") < 0 || in_range(g, -MOST_GPUS, MOST_GPUS, "g") < 0) return NULL;
    if (t < self->origin) t = self->origin;
    i64 *row = NULL;   /* the bounds of g GPUs and d's class, one per host */
    int c = 0;
    if (g >= 1 && g <= BOUND_LEVELS && d >= 1) {
        if (!(row = bounds_of(self, g))) return NULL;
        c = class_of(d);
        row += c * self->nhosts;
    }
    i64 best = FOREVER, best_free = 0, best_after = 0;
    Py_ssize_t best_host = -1;
    for (Py_ssize_t h = 0; h < self->nhosts; h++) {
        i64 from = t;
        if (row) {   /* most hosts are skipped here, on one row read through, touching no profile */
            i64 lb = row[h] == UNKNOWN ? host_bound(self, row, h, g, c) : row[h];   /* the call only when unknown */
            if (lb < 0 || lb > best) continue;
            if (lb > from) from = lb;
        } else if (self->hosts[h].gpus < g) {
            continue;
        }
        const Profile *p = &self->hosts[h];
        Py_ssize_t seg;
        i64 s = host_earliest(p, from, d, g, best, &seg);
        if (s < 0) continue;
        i64 f = p->vals[seg] < p->gpus ? p->vals[seg] : p->gpus;
        i64 a = by_end ? free_after(p, s, d) : 0;
        /* hosts in name order: a later host wins only with an earlier start or a lesser key */
        if (best_host < 0 || s < best || (s == best && (a < best_after || (a == best_after && f < best_free)))) {
            best = s;
            best_free = f;
            best_after = a;
            best_host = h;
            if (best == t && best_after == 0 && best_free == g) break;   /* no later host starts earlier or fits tighter */
        }
    }
    if (best_host < 0) Py_RETURN_NONE;
    return Py_BuildValue("(Ln)", best, best_host);
}

/* the least value of p over [T, T+d) (T in segment k) */
static i64 least_on(const Profile *p, Py_ssize_t k, i64 T, i64 d) {
    i64 least = p->vals[k];
    i64 until = d >= FOREVER - T ? FOREVER : T + d;
    for (Py_ssize_t i = k + 1; i < p->n && p->times[i] < until; i++)
        if (p->vals[i] < least) least = p->vals[i];
    return least;
}

/* earliest_gang(t, d, g, n) -> (start, [(free at start, host, VMs that fit), ...]) or None:
 * the earliest start at which n VMs of g GPUs fit for d seconds on the hosts together,
 * and every host that takes at least one then (the choice among them is
 * capacity.select_gang_hosts's). Tried at t, then at the next time a host's free GPUs rise:
 * until a host's next rise the VMs it takes for [T, T+d) can only stay or drop as T moves on
 * (the values from T to there do not rise, so the window gains nothing it did not lose). */
static PyObject *Scan_earliest_gang(ScanObject *self, PyObject *args) {
    long long t, d, g, n;
    if (!PyArg_ParseTuple(args, "LLLL", &t, &d, &g, &n) || in_range(t, -FOREVER, FOREVER, "t") < 0 ||
        in_range(d, 0, FOREVER, "d") < 0 || in_range(g, -MOST_GPUS, MOST_GPUS, "g") < 0) return NULL;
    if (g <= 0) Py_RETURN_NONE;
    i64 T = t < self->origin ? self->origin : t;
    i64 *row = NULL;   /* as in earliest_one */
    int c = 0;
    if (g <= BOUND_LEVELS && d >= 1) {
        if (!(row = bounds_of(self, g))) return NULL;
        c = class_of(d);
        row += c * self->nhosts;
    }
    for (;;) {
        i64 total = 0, next = FOREVER;
        for (Py_ssize_t h = 0; h < self->nhosts; h++) {
            const Profile *p = &self->hosts[h];
            if (p->gpus < g) continue;
            if (row) {   /* a host takes no VM before its bound, which is a time its free GPUs rise */
                i64 lb = host_bound(self, row, h, g, c);
                if (lb < 0) continue;
                if (lb > T) {
                    if (lb < next) next = lb;
                    continue;
                }
            }
            Py_ssize_t k = segment_at(p, T), r = k + 1;
            while (r < p->n && p->vals[r] <= p->vals[r - 1] && p->times[r] < next) r++;
            if (r < p->n && p->times[r] < next) next = p->times[r];
            i64 least = least_on(p, k, T, d);
            if (least >= g) total += least / g;
        }
        if (total >= n) break;
        if (next >= FOREVER) Py_RETURN_NONE;
        T = next;
    }
    PyObject *cands = PyList_New(0);
    if (!cands) return NULL;
    for (Py_ssize_t h = 0; h < self->nhosts; h++) {
        const Profile *p = &self->hosts[h];
        if (p->gpus < g || (row && (row[h] < 0 || row[h] > T))) continue;
        Py_ssize_t k = segment_at(p, T);
        i64 least = least_on(p, k, T, d);
        if (least < g) continue;
        PyObject *c = Py_BuildValue("(LnL)", p->vals[k], h, least / g);
        if (!c || PyList_Append(cands, c) < 0) {
            Py_XDECREF(c);
            Py_DECREF(cands);
            return NULL;
        }
        Py_DECREF(c);
    }
    return Py_BuildValue("(LN)", T, cands);
}

/* largest_free_now() -> the most GPUs free on one host at the origin */
static PyObject *Scan_largest_free_now(ScanObject *self, PyObject *Py_UNUSED(ignored)) {
    if (self->largest_now >= 0) return PyLong_FromLongLong(self->largest_now);   /* a plan asks once per lease */
    i64 best = 0;
    for (Py_ssize_t h = 0; h < self->nhosts; h++) {
        const Profile *p = &self->hosts[h];
        i64 v = p->vals[0] < p->gpus ? p->vals[0] : p->gpus;
        if (v > best) best = v;
    }
    self->largest_now = best;
    return PyLong_FromLongLong(best);
}

/* overcommitted(host) -> whether its holds take more GPUs than it has at some instant */
static PyObject *Scan_overcommitted(ScanObject *self, PyObject *args) {
    Py_ssize_t h;
    if (!PyArg_ParseTuple(args, "n", &h) || host_arg(self, h) < 0) return NULL;
    const Profile *p = &self->hosts[h];
    for (Py_ssize_t i = 0; i < p->n; i++)
        if (p->vals[i] < 0) Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

/* (times, vals) of a profile as two lists */
static PyObject *profile_lists(const Profile *p) {
    PyObject *times = PyList_New(p->n), *vals = PyList_New(p->n);
    if (!times || !vals) goto fail;
    for (Py_ssize_t i = 0; i < p->n; i++) {
        PyObject *a = PyLong_FromLongLong(p->times[i]), *b = PyLong_FromLongLong(p->vals[i]);
        if (!a || !b) { Py_XDECREF(a); Py_XDECREF(b); goto fail; }
        PyList_SET_ITEM(times, i, a);
        PyList_SET_ITEM(vals, i, b);
    }
    return Py_BuildValue("(NN)", times, vals);
fail:
    Py_XDECREF(times);
    Py_XDECREF(vals);
    return NULL;
}

/* profile(host) -> (times, vals): the host's free GPUs as StepProfile would hold them */
static PyObject *Scan_profile(ScanObject *self, PyObject *args) {
    Py_ssize_t h;
    if (!PyArg_ParseTuple(args, "n", &h) || host_arg(self, h) < 0) return NULL;
    return profile_lists(&self->hosts[h]);
}

static PyMethodDef Scan_methods[] = {
    {"reserve", (PyCFunction)Scan_reserve, METH_VARARGS, "reserve(host, start, end, gpus)"},
    {"earliest_one", (PyCFunction)Scan_earliest_one, METH_VARARGS, "earliest_one(t, d, g[, by_end]) -> (start, host) | None"},
    {"earliest_gang", (PyCFunction)Scan_earliest_gang, METH_VARARGS,
     "earliest_gang(t, d, g, n) -> (start, [(free, host, vms)]) | None"},
    {"largest_free_now", (PyCFunction)Scan_largest_free_now, METH_NOARGS, "largest_free_now() -> int"},
    {"overcommitted", (PyCFunction)Scan_overcommitted, METH_VARARGS, "overcommitted(host) -> bool"},
    {"profile", (PyCFunction)Scan_profile, METH_VARARGS, "profile(host) -> (times, vals)"},
    {NULL, NULL, 0, NULL}
};

static PyTypeObject ScanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "gpu_tenancy.domain._scan_index.Scan",
    .tp_basicsize = sizeof(ScanObject),
    .tp_dealloc = (destructor)Scan_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Scan(origin, [(gpus, holds), ...]): one GPU model's hosts in name order, holds as (start, end, -gpus)",
    .tp_methods = Scan_methods,
    .tp_init = (initproc)Scan_init,
    .tp_new = PyType_GenericNew,
};

/* Steps(origin, value, spans): one step function as StepProfile (profile.py) keeps it, for the
 * planner's quota book (quota_book.py), whose profiles take a reservation per lease planned:
 * the same arrays and operations as a host's profile above, with StepProfile's methods. */
typedef struct {
    PyObject_HEAD
    Profile p;
} StepsObject;

static void Steps_dealloc(StepsObject *self) {
    PyMem_Free(self->p.times);
    PyMem_Free(self->p.vals);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Steps_init(StepsObject *self, PyObject *args, PyObject *Py_UNUSED(kw)) {
    long long origin, value;
    PyObject *spans;
    if (!PyArg_ParseTuple(args, "LLO", &origin, &value, &spans) || in_range(origin, 0, FOREVER, "the origin") < 0 ||
        in_range(value, -MOST_GPUS, MOST_GPUS, "the value") < 0) return -1;
    if (self->p.times) {
        PyErr_SetString(PyExc_TypeError, "a Steps is made once");
        return -1;
    }
    Profile p = {0};
    p.gpus = value;   /* the value at the origin before the spans */
    if (profile_of_spans(&p, origin, spans) < 0) {
        PyMem_Free(p.times);
        PyMem_Free(p.vals);
        return -1;
    }
    self->p = p;
    return 0;
}

static int made(StepsObject *self) {
    if (self->p.n > 0) return 0;
    PyErr_SetString(PyExc_ValueError, "Steps not made");
    return -1;
}

/* add(start, end, delta): delta on [start, end), clipped to the origin */
static PyObject *Steps_add(StepsObject *self, PyObject *args) {
    long long start, end, delta;
    if (made(self) < 0 || !PyArg_ParseTuple(args, "LLL", &start, &end, &delta) ||
        in_range(start, -FOREVER, FOREVER, "start") < 0 || in_range(end, -FOREVER, FOREVER, "end") < 0 ||
        in_range(delta, -MOST_GPUS, MOST_GPUS, "delta") < 0) return NULL;
    if (profile_add(&self->p, start, end, delta) < 0) return NULL;
    Py_RETURN_NONE;
}

/* earliest_fit(t0, duration, need) -> the earliest t >= t0 with value >= need all over
 * [t, t + duration), or None */
static PyObject *Steps_earliest_fit(StepsObject *self, PyObject *args) {
    long long t, d, need;
    if (made(self) < 0 || !PyArg_ParseTuple(args, "LLL", &t, &d, &need) ||
        in_range(t, -FOREVER, FOREVER, "t0") < 0 || in_range(d, 0, FOREVER, "duration") < 0 ||
        in_range(need, -MOST_GPUS, MOST_GPUS, "need") < 0) return NULL;
    if (t < self->p.times[0]) t = self->p.times[0];
    Py_ssize_t seg;
    i64 s = host_earliest(&self->p, t, d, need, FOREVER, &seg);
    if (s < 0) Py_RETURN_NONE;
    return PyLong_FromLongLong(s);
}

/* value_at(t) -> the value at t (at the origin for t before it) */
static PyObject *Steps_value_at(StepsObject *self, PyObject *args) {
    long long t;
    if (made(self) < 0 || !PyArg_ParseTuple(args, "L", &t)) return NULL;
    Py_ssize_t i = segment_at(&self->p, t);
    return PyLong_FromLongLong(self->p.vals[i > 0 ? i : 0]);
}

/* min_on(start, end) -> the least value of the segments that meet [start, end) */
static PyObject *Steps_min_on(StepsObject *self, PyObject *args) {
    long long a, b;
    if (made(self) < 0 || !PyArg_ParseTuple(args, "LL", &a, &b) || in_range(a, -FOREVER, FOREVER, "start") < 0 ||
        in_range(b, -FOREVER, FOREVER, "end") < 0) return NULL;
    const Profile *p = &self->p;
    Py_ssize_t i = segment_at(p, a), j;
    if (i < 0) i = 0;
    j = b < FOREVER ? segment_at(p, b - 1) + 1 : p->n;
    if (j < i + 1) j = i + 1;
    i64 least = p->vals[i];
    for (Py_ssize_t k = i + 1; k < j; k++)
        if (p->vals[k] < least) least = p->vals[k];
    return PyLong_FromLongLong(least);
}

/* least() -> the least value anywhere */
static PyObject *Steps_least(StepsObject *self, PyObject *Py_UNUSED(ignored)) {
    if (made(self) < 0) return NULL;
    i64 least = self->p.vals[0];
    for (Py_ssize_t k = 1; k < self->p.n; k++)
        if (self->p.vals[k] < least) least = self->p.vals[k];
    return PyLong_FromLongLong(least);
}

/* times_between(a, b) -> [the segment starts t with a < t < b] */
static PyObject *Steps_times_between(StepsObject *self, PyObject *args) {
    long long a, b;
    if (made(self) < 0 || !PyArg_ParseTuple(args, "LL", &a, &b)) return NULL;
    const Profile *p = &self->p;
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    for (Py_ssize_t k = segment_at(p, a) + 1; k < p->n && p->times[k] < b; k++) {
        if (p->times[k] <= a) continue;
        PyObject *t = PyLong_FromLongLong(p->times[k]);
        if (!t || PyList_Append(out, t) < 0) {
            Py_XDECREF(t);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(t);
    }
    return out;
}

/* steps() -> (times, vals): as StepProfile holds them */
static PyObject *Steps_steps(StepsObject *self, PyObject *Py_UNUSED(ignored)) {
    if (made(self) < 0) return NULL;
    return profile_lists(&self->p);
}

static PyMethodDef Steps_methods[] = {
    {"add", (PyCFunction)Steps_add, METH_VARARGS, "add(start, end, delta)"},
    {"earliest_fit", (PyCFunction)Steps_earliest_fit, METH_VARARGS, "earliest_fit(t0, duration, need) -> int | None"},
    {"value_at", (PyCFunction)Steps_value_at, METH_VARARGS, "value_at(t) -> int"},
    {"min_on", (PyCFunction)Steps_min_on, METH_VARARGS, "min_on(start, end) -> int"},
    {"least", (PyCFunction)Steps_least, METH_NOARGS, "least() -> int"},
    {"times_between", (PyCFunction)Steps_times_between, METH_VARARGS, "times_between(a, b) -> [int]"},
    {"steps", (PyCFunction)Steps_steps, METH_NOARGS, "steps() -> (times, vals)"},
    {NULL, NULL, 0, NULL}
};

static PyTypeObject StepsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "gpu_tenancy.domain._scan_index.Steps",
    .tp_basicsize = sizeof(StepsObject),
    .tp_dealloc = (destructor)Steps_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Steps(origin, value, spans): a step function from the origin, spans as (start, end, delta)",
    .tp_methods = Steps_methods,
    .tp_init = (initproc)Steps_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef scan_module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "_scan_index",
    .m_doc = "The capacity index as integer arrays (scan_index.c).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__scan_index(void) {
    if (PyType_Ready(&ScanType) < 0 || PyType_Ready(&StepsType) < 0) return NULL;
    PyObject *m = PyModule_Create(&scan_module);
    if (!m) return NULL;
    Py_INCREF(&ScanType);
    if (PyModule_AddObject(m, "Scan", (PyObject *)&ScanType) < 0) {
        Py_DECREF(&ScanType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&StepsType);
    if (PyModule_AddObject(m, "Steps", (PyObject *)&StepsType) < 0) {
        Py_DECREF(&StepsType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
