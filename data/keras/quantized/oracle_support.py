"""What make_quantized.py and keras_reads.py share about the oracle's Keras."""


def keras_reloads_policy_maps():
    """The oracle runs Keras on its dm-tree fallback (optree is not in Debian), whose flatten rebuilds every Mapping
    it meets: a DTypePolicyMap (a keras-hub backbone's quantized layers, by path) would be rebuilt from a generator
    and fail ("Invalid dtype: <genexpr>"). optree, Keras's default, treats it as a leaf; so does this."""
    import tree
    import tree.sequence
    from keras.src.dtype_policies.dtype_policy_map import DTypePolicyMap

    rebuild = tree.sequence._sequence_like

    def sequence_like(instance, args):
        return instance if isinstance(instance, DTypePolicyMap) else rebuild(instance, args)

    tree.sequence._sequence_like = sequence_like
    if hasattr(tree, "_sequence_like"):
        tree._sequence_like = sequence_like
