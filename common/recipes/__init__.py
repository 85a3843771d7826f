"""Training recipes shared by several references (variants of one model family in one file).

A reference names one of them in its reference.toml, e.g.
`entry = "common.recipes.cifar10_resnet_pytorch:CifarResNet"`, and picks the variant with its
`[hyperparameters]`. To fork one, copy the file into the reference directory as train.py and set
`entry = "train:<Class>"`.
"""
