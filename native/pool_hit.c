/* offload_shim.memory._hit: the hit path of the memory manager, in C.
 *
 * MemoryManager (offload_shim/memory/manager.py) derives from PoolCore when this
 * module is built.  PoolCore holds the fields the hit path reads and writes (named
 * as the manager's Python code names them: _free, _live, _lockq, ...) and defines
 * allocate() and free(); every call that is not a plain hit or a plain cached free
 * goes to the manager's Python code (_allocate_py, _allocate_other, _free_py,
 * _free_other), which is also the whole path when this module is absent or
 * OFFLOAD_SHIM_POOL_PURE=1.  The steps are those of MemoryManager._allocate_py's
 * and _free_py's hit round trips, in the same order; tests/test_pool_hit_c.py runs
 * both paths side by side.
 *
 * Locking: the Python paths take the manager's lock by popping its one token from
 * _lockq (memory/locking.py).  This code does not take the token: it runs only
 * when the token is there (nobody holds the lock) and runs to its end holding the
 * GIL, calling no Python code meanwhile (dict operations on exact int keys,
 * the deque's own C functions, slot reads of Block records, 128-bit arithmetic), so no
 * other thread can take the lock between its test and its end.  When the token is
 * missing, the Python path waits for it.  The module keeps the GIL on
 * free-threaded builds (no Py_mod_gil slot).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

typedef unsigned __int128 u128;

typedef struct {
    PyObject_HEAD
    PyObject *free_;            /* _free: size -> deque of Block (free list) */
    PyObject *live;             /* _live: ptr -> Block */
    PyObject *lockq;            /* _lockq: the lock's token deque */
    PyObject *index;            /* _index: binned size index, or None */
    /* the accounting word _acc (bytes in use << 64 | hits) and its peak _peak_acc as
       128-bit integers (a Python int of three digits costs an allocation per addition);
       Python reads and writes them through getters and setters as ints */
    u128 acc, peak;
    /* the last hit_step and free_step objects met and their values: the blocks of a
       size share the two objects (MemoryManager._steps), so a hit reads no int of its
       own block -- under the exact policy a hit takes the least recently freed block,
       whose memory is the coldest */
    PyObject *hit_obj, *free_obj;
    u128 hit_val, free_val;
    unsigned long long held;    /* _held: bytes held from the backend */
    char peak_open;             /* _peak_open */
    char newest_first;          /* _newest_first */
    char slow;                  /* _slow */
} PoolCore;

/* set by configure() */
static PyObject *zero, *sixty_four, *low_mask;
static PyTypeObject *deque_type, *block_type;
static PyCFunction deque_pop, deque_popleft, deque_append, deque_appendleft;
static Py_ssize_t off_ptr, off_requested, off_hit_step, off_free_step, off_cache_list;
static int configured;
/* interned names */
static PyObject *s_allocate_py, *s_allocate_other, *s_free_py, *s_free_other;

#define LOW64 ((u128)~0ULL)

/* a slot of a Block record (borrowed), or NULL with AttributeError */
static inline PyObject *
slot(PyObject *block, Py_ssize_t off, const char *name)
{
    PyObject *v = *(PyObject **)((char *)block + off);
    if (v == NULL)
        PyErr_Format(PyExc_AttributeError, "Block record without %s", name);
    return v;
}

/* a Python int in [0, 2**128) as a u128; -1 with OverflowError/TypeError */
static int
as_u128(PyObject *v, const char *name, u128 *out)
{
    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int", name);
        return -1;
    }
    PyObject *h = NULL, *l = NULL;
    int rc = -1;
    int neg = PyObject_RichCompareBool(v, zero, Py_LT);
    if (neg) {
        if (neg > 0)
            PyErr_Format(PyExc_OverflowError, "%s must not be negative", name);
        return -1;
    }
    if ((h = PyNumber_Rshift(v, sixty_four)) == NULL || (l = PyNumber_And(v, low_mask)) == NULL)
        goto done;
    unsigned long long hv = PyLong_AsUnsignedLongLong(h), lv = 0;
    if (!PyErr_Occurred())
        lv = PyLong_AsUnsignedLongLong(l);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_OverflowError, "%s must be below 2**128", name);
        goto done;
    }
    *out = ((u128)hv << 64) | lv;
    rc = 0;
done:
    Py_XDECREF(h);
    Py_XDECREF(l);
    return rc;
}

/* the value of a step object (cached by identity, *obj holding a reference) */
static inline int
step_value(PyObject *step, PyObject **obj, u128 *val, const char *name)
{
    if (step == *obj)
        return 0;
    u128 v;
    if (as_u128(step, name, &v) < 0)
        return -1;
    Py_XSETREF(*obj, Py_NewRef(step));
    *val = v;
    return 0;
}

/* the hit path may run: configured, plain tables, a free lock (its token in the
   deque), no slow flag */
static inline int
may_run(PoolCore *self)
{
    return configured && !self->slow && self->lockq != NULL && self->free_ != NULL
        && self->live != NULL && Py_IS_TYPE(self->lockq, deque_type)
        && PyDict_CheckExact(self->free_) && PyDict_CheckExact(self->live)
        && Py_SIZE(self->lockq) > 0;
}

static PyObject *
core_allocate(PoolCore *self, PyObject *size)
{
    if (!PyLong_CheckExact(size) || !may_run(self))
        return PyObject_CallMethodOneArg((PyObject *)self, s_allocate_py, size);
    PyObject *fl = PyDict_GetItemWithError(self->free_, size);     /* borrowed */
    if (fl == NULL && PyErr_Occurred())
        return NULL;
    if (fl == NULL || !Py_IS_TYPE(fl, deque_type) || Py_SIZE(fl) == 0) {
        if ((self->index != NULL && self->index != Py_None)    /* binned: a larger size */
            || (fl != NULL && !Py_IS_TYPE(fl, deque_type)))
            return PyObject_CallMethodOneArg((PyObject *)self, s_allocate_py, size);
        /* no hit: where _allocate_py goes after its round trip */
        return PyObject_CallMethodOneArg((PyObject *)self, s_allocate_other, size);
    }
    int newest = self->newest_first;
    PyObject *block = (newest ? deque_pop : deque_popleft)(fl, NULL);
    if (block == NULL)
        return NULL;
    PyObject *ptr = NULL, *step = NULL;
    if (!Py_IS_TYPE(block, block_type)) {
        PyErr_Format(PyExc_TypeError, "free list holds a %.100s, not a Block record",
                     Py_TYPE(block)->tp_name);
        goto undo;
    }
    if ((ptr = slot(block, off_ptr, "ptr")) == NULL
        || (step = slot(block, off_hit_step, "hit_step")) == NULL
        || step_value(step, &self->hit_obj, &self->hit_val, "hit_step") < 0
        || PyDict_SetItem(self->live, ptr, block) < 0)
        goto undo;
    if (newest) {                   /* it may have served another request */
        PyObject **req = (PyObject **)((char *)block + off_requested);
        Py_XSETREF(*req, Py_NewRef(size));
    }
    Py_INCREF(ptr);
    Py_DECREF(block);               /* _live holds it */
    self->acc += self->hit_val;     /* bytes in use and the hit */
    if (self->peak_open && self->acc > self->peak) {
        self->peak = self->acc | LOW64;
        self->peak_open = (unsigned long long)(self->acc >> 64) < self->held;
    }
    return ptr;
undo: {
        /* the block back where it was, the error kept */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyObject *r = (newest ? deque_append : deque_appendleft)(fl, block);
        Py_XDECREF(r);
        if (r == NULL)
            PyErr_Clear();
        PyErr_Restore(et, ev, tb);
        Py_DECREF(block);
        return NULL;
    }
}

static PyObject *
core_free(PoolCore *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *ptr, *strict = Py_None;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs < 1 || nargs + nkw > 2)
        goto slow_args;
    if (nkw) {
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "strict") != 0)
            goto slow_args;
        strict = args[1];
    } else if (nargs == 2) {
        strict = args[1];
    }
    ptr = args[0];
    if (!PyLong_CheckExact(ptr) || !may_run(self))
        return PyObject_CallMethodObjArgs((PyObject *)self, s_free_py, ptr, strict, NULL);
    PyObject *block = PyDict_GetItemWithError(self->live, ptr);     /* borrowed */
    if (block == NULL) {
        if (PyErr_Occurred())
            return NULL;
        goto other;
    }
    if (!Py_IS_TYPE(block, block_type))
        return PyObject_CallMethodObjArgs((PyObject *)self, s_free_py, ptr, strict, NULL);
    PyObject *fl = slot(block, off_cache_list, "cache_list");
    if (fl == NULL)
        return NULL;
    if (fl == Py_None)              /* not a plain cached free: the other path books it */
        goto other;
    if (!Py_IS_TYPE(fl, deque_type))
        return PyObject_CallMethodObjArgs((PyObject *)self, s_free_py, ptr, strict, NULL);
    PyObject *step = slot(block, off_free_step, "free_step");
    if (step == NULL || step_value(step, &self->free_obj, &self->free_val, "free_step") < 0)
        return NULL;
    Py_INCREF(block);
    Py_INCREF(fl);
    PyObject *r = NULL;
    if (PyDict_DelItem(self->live, ptr) == 0) {
        r = deque_append(fl, block);
        if (r == NULL) {            /* still live: back in the table, the error kept */
            PyObject *et, *ev, *tb;
            PyErr_Fetch(&et, &ev, &tb);
            if (PyDict_SetItem(self->live, ptr, block) < 0)
                PyErr_Clear();
            PyErr_Restore(et, ev, tb);
        } else {
            self->acc -= self->free_val;    /* the block's bytes no longer in use */
        }
    }
    Py_DECREF(fl);
    Py_DECREF(block);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_NONE;
other:
    return PyObject_CallMethodObjArgs((PyObject *)self, s_free_other, ptr, strict, NULL);
slow_args: {
        /* anything but (ptr) / (ptr, strict) / (ptr, strict=...): Python says what */
        PyObject *meth = PyObject_GetAttr((PyObject *)self, s_free_py);
        if (meth == NULL)
            return NULL;
        PyObject *r = PyObject_Vectorcall(meth, args, nargs, kwnames);
        Py_DECREF(meth);
        return r;
    }
}

/* _acc and _peak_acc as Python ints */
static PyObject *
word_get(u128 w)
{
    PyObject *h = PyLong_FromUnsignedLongLong((unsigned long long)(w >> 64));
    PyObject *l = PyLong_FromUnsignedLongLong((unsigned long long)w), *t = NULL, *r = NULL;
    if (h && l && (t = PyNumber_Lshift(h, sixty_four)) != NULL)
        r = PyNumber_Or(t, l);
    Py_XDECREF(h);
    Py_XDECREF(l);
    Py_XDECREF(t);
    return r;
}

/* _acc and _peak_acc: which field, by which name */
struct word_field {
    Py_ssize_t off;
    const char *name;
};
static struct word_field acc_field = {offsetof(PoolCore, acc), "_acc"},
    peak_field = {offsetof(PoolCore, peak), "_peak_acc"};

static PyObject *
word_getter(PoolCore *self, void *c)
{
    return word_get(*(u128 *)((char *)self + ((struct word_field *)c)->off));
}

static int
word_setter(PoolCore *self, PyObject *v, void *c)
{
    const struct word_field *f = c;
    if (v == NULL) {
        PyErr_Format(PyExc_AttributeError, "cannot delete %s", f->name);
        return -1;
    }
    return as_u128(v, f->name, (u128 *)((char *)self + f->off));
}

static PyGetSetDef core_getset[] = {
    {"_acc", (getter)word_getter, (setter)word_setter,
     "the accounting word: bytes in use << 64 | hits (memory/records.py)", &acc_field},
    {"_peak_acc", (getter)word_getter, (setter)word_setter,
     "the accounting word's peak, low 64 bits all set", &peak_field},
    {NULL, NULL, NULL, NULL, NULL},
};

static int
core_traverse(PoolCore *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->free_);
    Py_VISIT(self->live);
    Py_VISIT(self->lockq);
    Py_VISIT(self->index);
    Py_VISIT(self->hit_obj);
    Py_VISIT(self->free_obj);
    return 0;
}

static int
core_clear(PoolCore *self)
{
    Py_CLEAR(self->free_);
    Py_CLEAR(self->live);
    Py_CLEAR(self->lockq);
    Py_CLEAR(self->index);
    Py_CLEAR(self->hit_obj);
    Py_CLEAR(self->free_obj);
    return 0;
}

static void
core_dealloc(PoolCore *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    core_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

#define MEMBER(name, type, field) {name, type, offsetof(PoolCore, field), 0, NULL}

static PyMemberDef core_members[] = {
    MEMBER("_free", T_OBJECT_EX, free_),
    MEMBER("_live", T_OBJECT_EX, live),
    MEMBER("_lockq", T_OBJECT_EX, lockq),
    MEMBER("_index", T_OBJECT_EX, index),
    MEMBER("_held", T_ULONGLONG, held),
    MEMBER("_peak_open", T_BOOL, peak_open),
    MEMBER("_newest_first", T_BOOL, newest_first),
    MEMBER("_slow", T_BOOL, slow),
    {NULL, 0, 0, 0, NULL},
};

PyDoc_STRVAR(allocate_doc,
"allocate(size) -> int\n\n"
"A device pointer for ``size`` bytes: the hit path in C, everything else\n"
"MemoryManager._allocate_py (offload_shim/memory/manager.py, which documents\n"
"the call).");

PyDoc_STRVAR(free_doc,
"free(ptr, strict=None) -> None\n\n"
"Give back a pointer: the cached free in C, everything else\n"
"MemoryManager._free_py (offload_shim/memory/manager.py, which documents the call).");

static PyMethodDef core_methods[] = {
    {"allocate", (PyCFunction)core_allocate, METH_O, allocate_doc},
    {"free", (PyCFunction)(void (*)(void))core_free, METH_FASTCALL | METH_KEYWORDS, free_doc},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot core_slots[] = {
    {Py_tp_doc, "The fields and the hit paths of a memory manager (offload_shim.memory.MemoryManager)."},
    {Py_tp_dealloc, core_dealloc},
    {Py_tp_traverse, core_traverse},
    {Py_tp_clear, core_clear},
    {Py_tp_members, core_members},
    {Py_tp_getset, core_getset},
    {Py_tp_methods, core_methods},
    {Py_tp_new, PyType_GenericNew},
    {0, NULL},
};

static PyType_Spec core_spec = {
    "offload_shim.memory._hit.PoolCore",
    sizeof(PoolCore),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    core_slots,
};

PyDoc_STRVAR(configure_doc,
"configure(deque, Block)\n\n"
"collections.deque and the Block record class (offload_shim/memory/records.py;\n"
"its slots ptr, requested, hit_step, free_step, cache_list are read in place); called once by\n"
"memory/hitpath.py before any allocate.  Until then every call takes the Python path.");

static int
method_of(PyTypeObject *tp, const char *name, int flags, PyCFunction *out)
{
    PyObject *d = PyObject_GetAttrString((PyObject *)tp, name);
    if (d == NULL)
        return -1;
    int ok = Py_IS_TYPE(d, &PyMethodDescr_Type)
        && (((PyMethodDescrObject *)d)->d_method->ml_flags & ~METH_COEXIST) == flags;
    if (ok)
        *out = ((PyMethodDescrObject *)d)->d_method->ml_meth;
    Py_DECREF(d);
    if (!ok)
        PyErr_Format(PyExc_TypeError, "%s.%s is not a C method of the expected kind",
                     tp->tp_name, name);
    return ok ? 0 : -1;
}

static int
slot_of(PyTypeObject *tp, const char *name, Py_ssize_t *out)
{
    PyObject *d = PyObject_GetAttrString((PyObject *)tp, name);
    if (d == NULL)
        return -1;
    int ok = Py_IS_TYPE(d, &PyMemberDescr_Type)
        && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
    if (ok)
        *out = ((PyMemberDescrObject *)d)->d_member->offset;
    Py_DECREF(d);
    if (!ok)
        PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", tp->tp_name, name);
    return ok ? 0 : -1;
}

static PyObject *
configure(PyObject *mod, PyObject *args)
{
    PyObject *dq, *bt;
    (void)mod;
    if (!PyArg_ParseTuple(args, "O!O!", &PyType_Type, &dq, &PyType_Type, &bt))
        return NULL;
    PyTypeObject *d = (PyTypeObject *)dq, *b = (PyTypeObject *)bt;
    PyCFunction pop, popleft, append, appendleft;
    Py_ssize_t o_ptr, o_req, o_hit, o_free, o_cl;
    if (method_of(d, "pop", METH_NOARGS, &pop) < 0
        || method_of(d, "popleft", METH_NOARGS, &popleft) < 0
        || method_of(d, "append", METH_O, &append) < 0
        || method_of(d, "appendleft", METH_O, &appendleft) < 0
        || slot_of(b, "ptr", &o_ptr) < 0 || slot_of(b, "requested", &o_req) < 0
        || slot_of(b, "hit_step", &o_hit) < 0 || slot_of(b, "free_step", &o_free) < 0
        || slot_of(b, "cache_list", &o_cl) < 0)
        return NULL;
    Py_XSETREF(deque_type, (PyTypeObject *)Py_NewRef(dq));
    Py_XSETREF(block_type, (PyTypeObject *)Py_NewRef(bt));
    deque_pop = pop;
    deque_popleft = popleft;
    deque_append = append;
    deque_appendleft = appendleft;
    off_ptr = o_ptr;
    off_requested = o_req;
    off_hit_step = o_hit;
    off_free_step = o_free;
    off_cache_list = o_cl;
    configured = 1;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"configure", configure, METH_VARARGS, configure_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_hit",
    "The memory manager's hit path in C (native/pool_hit.c).", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

#define INTERN(var, text) \
    do { if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL; } while (0)

PyMODINIT_FUNC
PyInit__hit(void)
{
    INTERN(s_allocate_py, "_allocate_py");
    INTERN(s_allocate_other, "_allocate_other");
    INTERN(s_free_py, "_free_py");
    INTERN(s_free_other, "_free_other");
    if ((zero == NULL && (zero = PyLong_FromLong(0)) == NULL)
        || (sixty_four == NULL && (sixty_four = PyLong_FromLong(64)) == NULL)
        || (low_mask == NULL && (low_mask = PyLong_FromUnsignedLongLong(~0ULL)) == NULL))
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    PyObject *tp = PyType_FromSpec(&core_spec);
    if (tp == NULL || PyModule_AddObject(m, "PoolCore", tp) < 0) {
        Py_XDECREF(tp);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
